"""The per-export :class:`DiagnosticContext` and its :class:`DiagnosticOptions`."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import pathlib
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Literal

from . import rules as _catalogue
from ._capture import capture_log_records, capture_python_warnings
from ._levels import Level
from ._locations import Location, Stack
from ._model import Diagnostic, ExceptionInfo
from ._rules import Rule
from .sarif import RunRecord, build_log, write_json_atomic

__all__ = ["DiagnosticContext", "DiagnosticOptions"]

_WRITE_REPORT_CHOICES = ("on_failure", "always", "never")


@dataclasses.dataclass(frozen=True)
class DiagnosticOptions:
    """What a :class:`DiagnosticContext` keeps, and where the exporter writes the report.

    Attributes:
        verbosity: Diagnostics below this level are dropped, except errors, which are
            always kept. ``Level.NOTE`` keeps notes; ``Level.NONE`` keeps everything.
        warnings_as_errors: Record WARNING diagnostics as ERROR.
        report_path: Where the exporter writes the SARIF report; ``None`` lets it choose.
        write_report: When the exporter writes the report: ``"on_failure"`` (default),
            ``"always"`` or ``"never"``. The context itself only writes when asked.

    Example:
        >>> options = DiagnosticOptions(verbosity=Level.NOTE, write_report="always")
        >>> options.warnings_as_errors
        False
    """

    verbosity: Level = Level.WARNING
    warnings_as_errors: bool = False
    report_path: str | os.PathLike[str] | None = None
    write_report: Literal["on_failure", "always", "never"] = "on_failure"

    def __post_init__(self) -> None:
        if not isinstance(self.verbosity, Level):
            raise TypeError(
                f"verbosity must be a Level such as Level.NOTE, not {self.verbosity!r}."
            )
        if self.write_report not in _WRITE_REPORT_CHOICES:
            raise ValueError(
                f"write_report must be one of {', '.join(map(repr, _WRITE_REPORT_CHOICES))}; "
                f"got {self.write_report!r}."
            )


@dataclasses.dataclass(frozen=True)
class _Outcome:
    end_time: datetime.datetime
    success: bool
    failure: ExceptionInfo | None


class DiagnosticContext:
    """Collects the diagnostics of one export and writes them as a SARIF 2.1.0 log.

    Create one context per export and pass it explicitly; contexts share no state, so
    exports in different threads never see each other's diagnostics. One context may also
    be used from several threads: logging is guarded by a lock.

    Args:
        tool_name: The tool named in the report (``tool.driver.name``).
        tool_version: Its version.
        options: Filtering and reporting options; defaults to ``DiagnosticOptions()``.
        information_uri: The tool's home page.
        source_root: Paths under this folder are written relative to ``SRCROOT``, which
            keeps reports comparable across machines.
        rules: The rule catalogue; it orders ``tool.driver.rules``. Rules outside it may
            still be logged and are listed after it.

    Example:
        >>> from onnx_export.diagnostics import rules
        >>> context = DiagnosticContext("onnx-export", "0.1.0")
        >>> _ = context.emit(
        ...     rules.UNSUPPORTED_OP,
        ...     message_args={"op": "aten::foo", "node": "foo_1", "module": "net"},
        ...     locations=[Location("/home/me/model.py", line=12)],
        ... )
        >>> context.has_errors()
        True
        >>> context.finish(success=False)
        >>> context.to_sarif()["runs"][0]["results"][0]["ruleId"]
        'OXE0006'
    """

    def __init__(
        self,
        tool_name: str,
        tool_version: str,
        options: DiagnosticOptions | None = None,
        *,
        information_uri: str = "https://github.com/onnx-export/onnx-export",
        source_root: str | os.PathLike[str] | None = None,
        rules: Sequence[Rule] = _catalogue.ALL_RULES,
    ) -> None:
        ids = [rule.id for rule in rules]
        duplicates = sorted({rule_id for rule_id in ids if ids.count(rule_id) > 1})
        if duplicates:
            raise ValueError(f"Rule ids must be unique; repeated: {', '.join(duplicates)}.")
        self._tool_name = tool_name
        self._tool_version = tool_version
        self._options = options if options is not None else DiagnosticOptions()
        self._information_uri = information_uri
        self._source_root = source_root
        self._rules = tuple(rules)
        self._start_time = datetime.datetime.now(datetime.UTC)
        self._lock = threading.Lock()
        self._diagnostics: list[Diagnostic] = []
        self._outcome: _Outcome | None = None

    @property
    def options(self) -> DiagnosticOptions:
        """The options this context was created with.

        Example:
            >>> DiagnosticContext("tool", "1.0").options.verbosity
            <Level.WARNING: 'warning'>
        """
        return self._options

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """A snapshot of the diagnostics kept so far, in the order they were logged.

        Example:
            >>> DiagnosticContext("tool", "1.0").diagnostics
            ()
        """
        with self._lock:
            return tuple(self._diagnostics)

    def log(self, diagnostic: Diagnostic) -> Diagnostic | None:
        """Keeps ``diagnostic`` unless the options filter it out.

        With ``warnings_as_errors`` a WARNING diagnostic becomes an ERROR one. Then errors
        are always kept, and other diagnostics only at or above ``options.verbosity``.

        Returns:
            The diagnostic as kept (possibly with a raised level), or ``None`` if dropped.

        Example:
            >>> from onnx_export.diagnostics import rules
            >>> context = DiagnosticContext("tool", "1.0")
            >>> note = Diagnostic(rules.MODEL_SAVED, Level.NOTE, "Saved.")
            >>> context.log(note) is None  # notes need verbosity=Level.NOTE
            True
        """
        if self._options.warnings_as_errors and diagnostic.level is Level.WARNING:
            diagnostic = dataclasses.replace(diagnostic, level=Level.ERROR)
        if diagnostic.level is not Level.ERROR and diagnostic.level < self._options.verbosity:
            return None
        with self._lock:
            self._diagnostics.append(diagnostic)
        return diagnostic

    def emit(
        self,
        rule: Rule,
        *,
        level: Level | None = None,
        message_args: Mapping[str, object] | None = None,
        locations: Sequence[Location] = (),
        related_locations: Sequence[Location] = (),
        stacks: Sequence[Stack] = (),
        code_flow: Sequence[Location] = (),
        properties: Mapping[str, object] | None = None,
        exception: BaseException | ExceptionInfo | None = None,
        markdown: str | None = None,
    ) -> Diagnostic | None:
        """Builds a diagnostic of ``rule`` and logs it (see :meth:`log`).

        Args:
            rule: The rule; its template is filled with ``message_args``.
            level: Overrides ``rule.default_level``.
            message_args: The template's fields.
            locations: Where the problem is.
            related_locations: Other relevant places.
            stacks: Call stacks, outermost frame first.
            code_flow: Steps that led here.
            properties: Extra JSON-able data.
            exception: The exception behind the diagnostic; its traceback becomes a stack.
            markdown: A Markdown version of the message.

        Raises:
            KeyError: If ``message_args`` lacks a field of the rule's template.

        Example:
            >>> from onnx_export.diagnostics import rules
            >>> context = DiagnosticContext("tool", "1.0")
            >>> kept = context.emit(
            ...     rules.EXPORT_FAILED,
            ...     message_args={"stage": "translation", "exception_message": "boom"},
            ... )
            >>> kept.message
            'Export failed during translation: boom'
        """
        if isinstance(exception, BaseException):
            exception = ExceptionInfo.from_exception(exception)
        diagnostic = Diagnostic(
            rule=rule,
            level=rule.default_level if level is None else level,
            message=rule.format_message(**dict(message_args or {})),
            markdown=markdown,
            locations=tuple(locations),
            related_locations=tuple(related_locations),
            stacks=tuple(stacks),
            code_flow=tuple(code_flow),
            properties=dict(properties or {}),
            exception=exception,
        )
        return self.log(diagnostic)

    def has_errors(self) -> bool:
        """Whether an ERROR diagnostic was kept.

        Example:
            >>> DiagnosticContext("tool", "1.0").has_errors()
            False
        """
        return bool(self.errors())

    def errors(self) -> tuple[Diagnostic, ...]:
        """The ERROR diagnostics kept so far, in order.

        Example:
            >>> DiagnosticContext("tool", "1.0").errors()
            ()
        """
        return tuple(d for d in self.diagnostics if d.level is Level.ERROR)

    def finish(
        self, *, success: bool, exception: BaseException | ExceptionInfo | None = None
    ) -> None:
        """Records the end of the run: end time, success and the exception that ended it.

        The exception, if any, becomes a ``toolExecutionNotification`` (level error) with
        its stack. Calling ``finish`` again replaces the earlier outcome. Pass an
        :class:`ExceptionInfo` (e.g. made with a ``frame_filter``) to choose the frames.

        Example:
            >>> context = DiagnosticContext("tool", "1.0")
            >>> context.finish(success=False, exception=RuntimeError("boom"))
            >>> invocation = context.to_sarif()["runs"][0]["invocations"][0]
            >>> invocation["executionSuccessful"]
            False
            >>> invocation["toolExecutionNotifications"][0]["message"]["text"]
            'RuntimeError: boom'
        """
        failure = (
            ExceptionInfo.from_exception(exception)
            if isinstance(exception, BaseException)
            else exception
        )
        outcome = _Outcome(datetime.datetime.now(datetime.UTC), success, failure)
        with self._lock:
            self._outcome = outcome

    def to_sarif(self) -> dict[str, object]:
        """Returns the SARIF 2.1.0 log as JSON-able dicts; usable before or after ``finish``.

        Before ``finish``, ``endTimeUtc`` is absent and ``executionSuccessful`` says whether
        no error was logged so far. Errors, warnings and notes are results of kind ``"fail"``
        with their level (``"note"`` for notes); ``Level.NONE`` records are of kind
        ``"informational"`` and therefore, as SARIF §3.27.10 requires, of level ``"none"``.

        Example:
            >>> log = DiagnosticContext("tool", "1.0").to_sarif()
            >>> log["version"], log["runs"][0]["tool"]["driver"]["name"]
            ('2.1.0', 'tool')
        """
        return dict(build_log(self._record()))

    def write_sarif(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes the SARIF log to ``path`` atomically, creating parent folders.

        Returns:
            The resolved path of the report.

        Raises:
            SarifWriteError: An :class:`OSError` naming the path, if it cannot be written.

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     path = DiagnosticContext("tool", "1.0").write_sarif(f"{folder}/out/r.sarif")
            >>> path.name
            'r.sarif'
        """
        return write_json_atomic(self.to_sarif(), path)

    def record_python_warnings(
        self, *, library_paths: Sequence[str] = ()
    ) -> AbstractContextManager[None]:
        """Records warnings raised in the block as PYTHON_WARNING diagnostics.

        Each ``warnings.warn`` in the block becomes a WARNING diagnostic located at the
        warning's file and line; it is recorded instead of printed, and the active warning
        filters still decide what is raised at all. Warnings whose file lies under one of
        ``library_paths`` (third-party code the user cannot change) are recorded as notes,
        so that ``warnings_as_errors`` is about the user's own code.
        :func:`warnings.catch_warnings` is process-global: serialise blocks that use it
        across threads (``torch.export`` is not thread-safe either).

        Example:
            >>> import warnings
            >>> context = DiagnosticContext("tool", "1.0")
            >>> with context.record_python_warnings():
            ...     warnings.warn("old API", UserWarning)
            >>> context.diagnostics[0].message
            'UserWarning: old API'
        """
        return capture_python_warnings(self.log, library_paths)

    def record_log_records(
        self, logger_names: Sequence[str], *, min_level: int = logging.WARNING
    ) -> AbstractContextManager[None]:
        """Records log records of the named loggers, during the block, as LOG_RECORD diagnostics.

        Levels map as: CRITICAL to error; ERROR and WARNING to warning (libraries log
        errors they recover from); lower levels to note. The handler is process-global:
        it sees records from every thread while attached. A logger whose own level is
        above ``min_level`` still filters records before the handler sees them.

        Args:
            logger_names: Names of the loggers to listen to, e.g. ``["onnxscript"]``.
            min_level: The lowest logging level to record.

        Example:
            >>> import logging
            >>> context = DiagnosticContext("tool", "1.0")
            >>> with context.record_log_records(["example.lib"]):
            ...     logging.getLogger("example.lib").error("retrying")
            >>> context.diagnostics[0].level, context.diagnostics[0].message
            (<Level.WARNING: 'warning'>, '[example.lib] retrying')
        """
        return capture_log_records(self.log, logger_names, min_level)

    def _record(self) -> RunRecord:
        with self._lock:
            diagnostics = tuple(self._diagnostics)
            outcome = self._outcome
        return RunRecord(
            tool_name=self._tool_name,
            tool_version=self._tool_version,
            information_uri=self._information_uri,
            source_root=self._source_root,
            catalogue=self._rules,
            diagnostics=diagnostics,
            start_time=self._start_time,
            end_time=outcome.end_time if outcome else None,
            success=outcome.success if outcome else None,
            failure=outcome.failure if outcome else None,
        )
