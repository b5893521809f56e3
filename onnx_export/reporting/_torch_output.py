"""torch's logs and stderr prints during an export: into the report, on stderr only when asked.

torch logs through its own handlers (``torch._logging`` gives ``torch`` and a few dozen
``torch.*`` loggers a ``StreamHandler`` on stderr and stops their propagation) and prints
some things itself (``torch.export`` prints the partial FX graph of a failed trace with
``print(..., file=sys.stderr)``). A library call should not write to its caller's terminal:
while the export runs, torch's stream handlers are replaced by one that records each record
as an OXE0015 diagnostic, and ``sys.stderr`` by a buffer whose text becomes one more.

They reach stderr as well when the user asked for logs: the ``onnx_export`` logger enabled
for ``INFO`` (``logging.getLogger("onnx_export").setLevel(logging.INFO)``, or a root logger
at ``INFO``/``DEBUG``). The package reads no environment variable (docs/environment.md), so
torch's ``TORCH_LOGS`` alone does not bring them back: enable the logger.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Collection, Iterator

import torch

from onnx_export.diagnostics import Diagnostic, DiagnosticContext, Level, rules

__all__ = ["logs_requested", "record_torch_output"]

#: The longest stderr text kept in one diagnostic (graph dumps can be long).
_MAX_TEXT = 20_000


def logs_requested() -> bool:
    """Whether the user asked to see torch's logs on stderr during an export."""
    return logging.getLogger("onnx_export").isEnabledFor(logging.INFO)


@contextlib.contextmanager
def record_torch_output(context: DiagnosticContext, *, show: bool | None = None) -> Iterator[None]:
    """Record torch's log records and stderr prints into ``context`` while the block runs.

    Args:
        context: The export's diagnostic context.
        show: Also let them reach stderr; defaults to :func:`logs_requested`.
    """
    show = logs_requested() if show is None else show
    handler = _RecordingHandler(context)
    muted = _attach(handler, mute=not show)
    sink = None if show else io.StringIO()
    saved = sys.stderr
    if sink is not None:
        sys.stderr = sink
    try:
        yield
    finally:
        if sink is not None:
            sys.stderr = saved
            _record_text(context, sink.getvalue())
        _detach(handler, muted)


class _RecordingHandler(logging.Handler):
    """Each record once as an OXE0015 diagnostic (ERROR and WARNING records as warnings)."""

    def __init__(self, context: DiagnosticContext) -> None:
        super().__init__(logging.WARNING)
        self._context = context
        self._last: logging.LogRecord | None = None  # held: a freed record's id is reused

    def emit(self, record: logging.LogRecord) -> None:
        if record is self._last:  # the same record reached a second torch logger
            return
        self._last = record
        try:
            message = record.getMessage()
        except Exception:  # bad %-format arguments: keep the raw message
            message = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message} ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        level = Level.ERROR if record.levelno >= logging.CRITICAL else Level.WARNING
        if level is Level.WARNING and self._context.options.warnings_as_errors:
            # torch's own chatter (guard errors of an LSTM, ...) is not the user's code:
            # warnings_as_errors must not fail an export over it (like library warnings).
            level = Level.NOTE
        self._context.emit(
            rules.LOG_RECORD,
            level=level,
            message_args={"logger": record.name, "message": message[:_MAX_TEXT]},
            properties={"logger": record.name, "levelname": record.levelname},
        )


def _torch_loggers() -> list[logging.Logger]:
    """``torch`` and every ``torch.*`` logger that has handlers or stops propagation."""
    loggers = [logging.getLogger("torch")]
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if not name.startswith("torch.") or not isinstance(logger, logging.Logger):
            continue
        if logger.handlers or not logger.propagate:
            loggers.append(logger)
    return loggers


def _terminal_handler(handler: logging.Handler) -> bool:
    """A handler of torch's, or one on the process's stderr or stdout; not a file's.

    torch's structured trace (``TORCH_TRACE``, a ``LazyTraceHandler``) writes files: kept.
    torch 2.14's own handler (``_StderrHandler``) is a plain ``logging.Handler`` that writes
    to whatever ``sys.stderr`` is at the time, so torch's handlers are matched first.
    """
    if type(handler).__name__ == "LazyTraceHandler" or isinstance(handler, logging.FileHandler):
        return False
    if handler in _torch_handlers():
        return True
    if not isinstance(handler, logging.StreamHandler):
        return False
    return handler.stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)


def _torch_handlers() -> Collection[logging.Handler]:
    """The handlers ``torch._logging`` created (it tracks them so as not to touch users')."""
    internal = getattr(getattr(torch, "_logging", None), "_internal", None)
    handlers = getattr(internal, "handlers", None)
    return handlers if isinstance(handlers, Collection) else ()


_Muted = list[tuple[logging.Logger, list[logging.Handler]]]


def _attach(handler: logging.Handler, *, mute: bool) -> _Muted:
    muted: _Muted = []
    for logger in _torch_loggers():
        removed = [h for h in logger.handlers if mute and _terminal_handler(h)]
        for h in removed:
            logger.removeHandler(h)
        logger.addHandler(handler)
        muted.append((logger, removed))
    return muted


def _detach(handler: logging.Handler, muted: _Muted) -> None:
    for logger, removed in muted:
        logger.removeHandler(handler)
        for h in removed:
            if h not in logger.handlers:
                logger.addHandler(h)


def _record_text(context: DiagnosticContext, text: str) -> None:
    """What was printed to ``sys.stderr``, as one diagnostic."""
    if not text.strip():
        return
    if len(text) > _MAX_TEXT:
        text = text[:_MAX_TEXT] + f"\n... ({len(text) - _MAX_TEXT} more characters)"
    context.log(
        Diagnostic(
            rule=rules.LOG_RECORD,
            level=Level.WARNING,
            message=rules.LOG_RECORD.format_message(logger="sys.stderr", message=text.rstrip()),
            properties={"logger": "sys.stderr"},
        )
    )
