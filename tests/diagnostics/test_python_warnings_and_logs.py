"""record_python_warnings and record_log_records turn warnings and log records into results."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import pytest

from onnx_export.diagnostics import DiagnosticContext, DiagnosticOptions, Level, rules
from tests.sarif_helpers import assert_valid_sarif

LOGGER = "tests.diagnostics.example_library"


@pytest.fixture
def library_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(LOGGER)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    yield logger
    logger.setLevel(previous)


def make_context(verbosity: Level = Level.NOTE) -> DiagnosticContext:
    return DiagnosticContext("onnx-export", "0.1.0", DiagnosticOptions(verbosity=verbosity))


def warn_here() -> int:
    warnings.warn("x is deprecated", DeprecationWarning, stacklevel=1)
    return warn_here.__code__.co_firstlineno + 1


# --- warnings -----------------------------------------------------------------------------------


def test_warning_becomes_a_python_warning_diagnostic_at_its_line() -> None:
    context = make_context()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with context.record_python_warnings():
            line = warn_here()
    (diagnostic,) = context.diagnostics
    assert diagnostic.rule is rules.PYTHON_WARNING
    assert diagnostic.level is Level.WARNING
    assert diagnostic.message == "DeprecationWarning: x is deprecated"
    (location,) = diagnostic.locations
    assert (location.uri, location.line) == (__file__, line)
    assert location.snippet == 'warnings.warn("x is deprecated", DeprecationWarning, stacklevel=1)'
    assert diagnostic.properties["category"] == "builtins.DeprecationWarning"
    assert_valid_sarif(context.to_sarif())


def test_warnings_are_recorded_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    context = make_context()
    with context.record_python_warnings():
        warnings.warn("quiet please", UserWarning, stacklevel=1)
    assert "quiet please" not in capsys.readouterr().err
    assert [d.message for d in context.diagnostics] == ["UserWarning: quiet please"]


def test_ignored_warnings_stay_ignored() -> None:
    context = make_context()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=FutureWarning)
        with context.record_python_warnings():
            warnings.warn("ignored", FutureWarning, stacklevel=1)
            warnings.warn("kept", UserWarning, stacklevel=1)
    assert [d.message for d in context.diagnostics] == ["UserWarning: kept"]


def test_warnings_are_recorded_when_the_block_raises() -> None:
    context = make_context()
    with pytest.raises(RuntimeError), context.record_python_warnings():
        warnings.warn("before the failure", UserWarning, stacklevel=1)
        raise RuntimeError("capture failed")
    assert [d.message for d in context.diagnostics] == ["UserWarning: before the failure"]


def test_warnings_follow_warnings_as_errors() -> None:
    context = DiagnosticContext("t", "1", DiagnosticOptions(warnings_as_errors=True))
    with context.record_python_warnings():
        warnings.warn("strict", UserWarning, stacklevel=1)
    assert context.has_errors()


def test_warning_filters_are_restored_after_the_block() -> None:
    before = list(warnings.filters)
    with make_context().record_python_warnings():
        warnings.simplefilter("ignore")
    assert warnings.filters == before


# --- logging ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log_level", "expected"),
    [
        (logging.INFO, Level.NOTE),
        (logging.WARNING, Level.WARNING),
        (logging.ERROR, Level.WARNING),
        (logging.CRITICAL, Level.ERROR),
    ],
    ids=["info-note", "warning-warning", "error-warning", "critical-error"],
)
def test_log_levels_map_to_diagnostic_levels(
    library_logger: logging.Logger, log_level: int, expected: Level
) -> None:
    logger = library_logger
    context = make_context()
    with context.record_log_records([LOGGER], min_level=logging.INFO):
        logger.log(log_level, "step %d of %d", 1, 3)
    (diagnostic,) = context.diagnostics
    assert diagnostic.rule is rules.LOG_RECORD
    assert diagnostic.level is expected
    assert diagnostic.message == f"[{LOGGER}] step 1 of 3"
    (location,) = diagnostic.locations
    assert location.uri == __file__
    assert location.function == "test_log_levels_map_to_diagnostic_levels"
    assert_valid_sarif(context.to_sarif())


def test_records_below_min_level_are_not_recorded(library_logger: logging.Logger) -> None:
    logger = library_logger
    context = make_context()
    with context.record_log_records([LOGGER]):  # default min_level=WARNING
        logger.info("chatty")
        logger.warning("worth seeing")
    assert [d.message for d in context.diagnostics] == [f"[{LOGGER}] worth seeing"]


def test_child_loggers_propagate_to_a_recorded_parent() -> None:
    context = make_context()
    with context.record_log_records([LOGGER]):
        logging.getLogger(f"{LOGGER}.child").warning("from a child")
    assert [d.message for d in context.diagnostics] == [f"[{LOGGER}.child] from a child"]


def test_handler_is_removed_after_the_block() -> None:
    logger = logging.getLogger(LOGGER)
    handlers = list(logger.handlers)
    context = make_context()
    with context.record_log_records([LOGGER]):
        assert len(logger.handlers) == len(handlers) + 1
    assert logger.handlers == handlers
    logger.warning("after the block")
    assert context.diagnostics == ()


def test_logged_exception_is_attached() -> None:
    context = make_context()
    with context.record_log_records([LOGGER]):
        try:
            raise ValueError("bad value")
        except ValueError:
            logging.getLogger(LOGGER).exception("recovered")
    (diagnostic,) = context.diagnostics
    assert diagnostic.exception is not None
    assert str(diagnostic.exception) == "ValueError: bad value"
    assert_valid_sarif(context.to_sarif())


def test_bad_format_arguments_keep_the_raw_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keep the record away from pytest's own capture handler, which raises on bad arguments.
    monkeypatch.setattr(logging.getLogger(LOGGER), "propagate", False)
    context = make_context()
    with context.record_log_records([LOGGER]):
        logging.getLogger(LOGGER).warning("needs %d args", "not a number")
    assert [d.message for d in context.diagnostics] == [f"[{LOGGER}] needs %d args"]


def test_a_single_string_is_rejected_as_logger_names() -> None:
    with (
        pytest.raises(TypeError, match="sequence of logger names"),
        make_context().record_log_records(LOGGER),
    ):
        pass
