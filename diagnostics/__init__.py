"""Per-run diagnostics with SARIF 2.1.0 reports; standard library only.

An exporter creates one :class:`DiagnosticContext` per run, passes it down explicitly,
emits diagnostics of the rules in :mod:`onnx_export.diagnostics.rules`, and
writes the SARIF log with
:meth:`DiagnosticContext.write_sarif`. :func:`summarize` (or ``python -m onnx_export.diagnostics
REPORT.sarif``) turns a report back into text for people.

Example:
    >>> from onnx_export import diagnostics
    >>> from onnx_export.diagnostics import rules
    >>> context = diagnostics.DiagnosticContext(
    ...     "onnx-export", "0.1.0", diagnostics.DiagnosticOptions(verbosity=diagnostics.Level.NOTE)
    ... )
    >>> _ = context.emit(rules.MODEL_SAVED, message_args={"path": "m.onnx", "size": 1024})
    >>> context.finish(success=True)
    >>> print(diagnostics.summarize(context.to_sarif()).splitlines()[-1])
    0 errors, 0 warnings, 1 note
"""

from __future__ import annotations

from . import rules
from ._context import DiagnosticContext, DiagnosticOptions
from ._errors import DiagnosticsError, SarifFormatError, SarifWriteError
from ._frames import (
    location_from_frame,
    locations_from_stack_trace,
    locations_from_traceback,
)
from ._levels import Level
from ._locations import Location, Stack
from ._model import Diagnostic, ExceptionInfo
from ._rules import Rule
from ._summary import main, summarize
from .rules import ALL_RULES, get_rule
from .sarif import load_sarif

__all__ = [
    # Collecting diagnostics
    "DiagnosticContext",
    "DiagnosticOptions",
    # What a diagnostic is
    "Level",
    "Rule",
    "Diagnostic",
    "Location",
    "Stack",
    "ExceptionInfo",
    # The rule catalogue
    "rules",
    "ALL_RULES",
    "get_rule",
    # Locations from Python frames and stack traces
    "location_from_frame",
    "locations_from_stack_trace",
    "locations_from_traceback",
    # Reading reports back
    "load_sarif",
    "summarize",
    "main",
    # Errors
    "DiagnosticsError",
    "SarifFormatError",
    "SarifWriteError",
]
