"""Turns Python warnings and logging records into diagnostics while a block runs.

Both mechanisms are process-global: :func:`warnings.catch_warnings` swaps module state of
:mod:`warnings`, and a logging handler sees records from every thread. Callers that export
from several threads must not overlap these blocks.
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

from . import rules
from ._levels import Level
from ._locations import Location
from ._model import Diagnostic, ExceptionInfo

__all__ = ["LogFunction", "capture_log_records", "capture_python_warnings"]

LogFunction = Callable[[Diagnostic], Diagnostic | None]


@contextlib.contextmanager
def capture_python_warnings(log: LogFunction, library_paths: Sequence[str] = ()) -> Iterator[None]:
    """Records each warning raised in the block as a :data:`~rules.PYTHON_WARNING` diagnostic.

    The active warning filters still apply ("ignore" stays ignored); warnings are recorded
    instead of printed. Warnings are logged when the block ends, even if it raises.
    Warnings whose file lies under one of ``library_paths`` are recorded as notes.
    """
    prefixes = tuple(library_paths)
    caught: list[tuple[warnings.WarningMessage, tuple[str, int] | None]] = []

    def record(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: object = None,
        line: str | None = None,
    ) -> None:
        warning = warnings.WarningMessage(message, category, filename, lineno, None, line)
        caught.append((warning, _caller_outside(prefixes) if prefixes else None))

    with warnings.catch_warnings():
        warnings.showwarning = record
        try:
            yield
        finally:
            for message, caller in caught:
                from_library = bool(prefixes) and message.filename.startswith(prefixes)
                level = Level.NOTE if from_library else None
                log(_diagnostic_from_warning(message, level, caller if from_library else None))


def _caller_outside(prefixes: tuple[str, ...]) -> tuple[str, int] | None:
    """``(file, line)`` of the innermost frame outside ``prefixes``, warnings and this package."""
    frame = sys._getframe(2)  # record's caller: warnings' own frames
    own = os.path.dirname(os.path.abspath(__file__)) + os.sep
    while frame is not None:
        path = frame.f_code.co_filename
        if path != warnings.__file__ and not path.startswith(("<", own, *prefixes)):
            return path, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop
    return None


def _diagnostic_from_warning(
    warning: warnings.WarningMessage,
    level: Level | None = None,
    caller: tuple[str, int] | None = None,
) -> Diagnostic:
    """A warning as a diagnostic, at its own line, or at the line of the caller that led to it.

    A warning raised in a library (``level`` given) is located at ``caller`` (no location
    when no such line is on the stack); its own ``file:line`` is the ``raisedAt`` property.
    """
    category = warning.category.__name__
    text = str(warning.message)
    properties = {"category": f"{warning.category.__module__}.{warning.category.__qualname__}"}
    locations: tuple[Location, ...] = ()
    if level is None or caller is not None:
        path, line = caller or (warning.filename, warning.lineno)
        snippet = linecache.getline(path, line).strip() or None
        locations = (Location(path, line=line, snippet=snippet),)
    if level is not None:
        properties["raisedAt"] = f"{warning.filename}:{warning.lineno}"
    return Diagnostic(
        rule=rules.PYTHON_WARNING,
        level=level or Level.WARNING,
        message=rules.PYTHON_WARNING.format_message(category=category, message=text),
        locations=locations,
        properties=properties,
    )


@contextlib.contextmanager
def capture_log_records(
    log: LogFunction, logger_names: Sequence[str], min_level: int
) -> Iterator[None]:
    """Attaches a handler to the named loggers for the block; records become diagnostics.

    Only records that the logger itself lets through reach the handler: a logger whose
    effective level is above ``min_level`` keeps filtering. Existing handlers still run.
    """
    if isinstance(logger_names, str):
        raise TypeError(
            f"logger_names must be a sequence of logger names, not the string {logger_names!r}; "
            f"write [{logger_names!r}]."
        )
    handler = _DiagnosticHandler(log, min_level)
    loggers = [logging.getLogger(name) for name in logger_names]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


class _DiagnosticHandler(logging.Handler):
    def __init__(self, log: LogFunction, level: int) -> None:
        super().__init__(level)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log(_diagnostic_from_record(record))
        except Exception:  # a handler must never raise into the code that logged
            self.handleError(record)


def _diagnostic_from_record(record: logging.LogRecord) -> Diagnostic:
    try:
        text = record.getMessage()
    except Exception:  # bad %-format arguments: keep the raw message
        text = str(record.msg)
    exception = None
    if record.exc_info and record.exc_info[1] is not None:
        exception = ExceptionInfo.from_exception(record.exc_info[1])
    return Diagnostic(
        rule=rules.LOG_RECORD,
        level=_level_of(record.levelno),
        message=rules.LOG_RECORD.format_message(logger=record.name, message=text),
        locations=(Location(record.pathname, line=record.lineno, function=record.funcName),),
        properties={"logger": record.name, "levelname": record.levelname},
        exception=exception,
    )


def _level_of(levelno: int) -> Level:
    """Maps a logging level: CRITICAL is an error, ERROR and WARNING warnings, lower a note.

    Logged errors are warnings because libraries log the errors they recover from.
    """
    if levelno >= logging.CRITICAL:
        return Level.ERROR
    if levelno >= logging.WARNING:
        return Level.WARNING
    return Level.NOTE
