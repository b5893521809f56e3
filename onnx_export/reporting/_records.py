"""What an export records in its ``DiagnosticContext``: one function per kind of event."""

from __future__ import annotations

import dataclasses
import inspect
import linecache
import os
import pathlib
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import onnxscript
import torch
from torch.export import ExportedProgram

from onnx_export import diagnostics
from onnx_export.capture._decomp import DecompositionReport
from onnx_export.capture._specialized import RangeGuard, model_file
from onnx_export.capture._strategies import CaptureAttempt, explanation
from onnx_export.capture._user_code import exporter_dirs, is_exporter_code, is_user_code
from onnx_export.capture.patches import PatchOutcome
from onnx_export.diagnostics import (
    DiagnosticContext,
    DiagnosticOptions,
    ExceptionInfo,
    Level,
    Location,
    Stack,
    rules,
)
from onnx_export.translation._dispatch import Dispatch
from onnx_export.translation._naming import MergedDimName
from onnx_export.translation._source import NodeOrigin, node_origin
from onnx_export.translation._translate import (
    NodeTranslationError,
    UnsupportedNode,
    decision_key,
    walk_call_nodes,
)

__all__ = [
    "new_context",
    "user_frame",
    "record_capture",
    "record_patches",
    "record_decomposition",
    "record_dispatch",
    "record_unsupported",
    "record_translation_plan",
    "record_conversion_failure",
    "record_dropped_mutations",
    "record_guarded_ranges",
    "record_resized_capture",
    "record_held_sizes",
    "record_unproved_axes",
    "origin_locations",
    "write_failure_report",
]

TOOL_NAME = "onnx-export"
TOOL_VERSION = "0.1.0"
#: Loggers recorded as they are; torch's are recorded (and muted) by ``_torch_output``.
LOGGERS = ("onnxscript",)

_LIBRARY_DIRS = (
    *(
        os.path.dirname(path) + os.sep
        for path in (torch.__file__, onnxscript.__file__, diagnostics.__file__)
        if path
    ),
    *exporter_dirs(),
)

_PLAIN_LIBRARY_PATHS = (
    *_LIBRARY_DIRS,
    sysconfig.get_paths()["stdlib"] + os.sep,
    sysconfig.get_paths()["purelib"] + os.sep,
    sysconfig.get_paths()["platlib"] + os.sep,
)
#: Where third-party code lives (as given and with links resolved): warnings raised there
#: are notes, not the user's warnings, and are located at the user's line that led to them.
LIBRARY_PATHS = tuple(
    dict.fromkeys(
        (*_PLAIN_LIBRARY_PATHS, *(os.path.realpath(p) + os.sep for p in _PLAIN_LIBRARY_PATHS))
    )
)


def new_context(options: DiagnosticOptions | None) -> DiagnosticContext:
    """A fresh context for one export, with paths relative to the working directory."""
    return DiagnosticContext(TOOL_NAME, TOOL_VERSION, options, source_root=os.getcwd())


#: Where no user code lives: libraries, the standard library (``contextlib.py``...) and the
#: scripts folder (``bin/onnx-export``), as given and with links resolved.
_NOT_USER = tuple(
    {
        *LIBRARY_PATHS,
        *(os.path.realpath(p) + os.sep for p in LIBRARY_PATHS),
        sysconfig.get_paths()["scripts"] + os.sep,
        os.path.join(sys.prefix, "bin") + os.sep,
        os.path.join(sys.prefix, "Scripts") + os.sep,
    }
)


def user_frame(path: str) -> bool:
    """Whether a frame's file is the user's: not a library's, the stdlib's, a script's or ours.

    Stricter than :func:`~onnx_export.capture._user_code.is_user_code` (which node origins
    and guards use, where a transformers model's line is the model's): a failure or a
    warning raised inside any library is located at the user's line that led there.
    """
    return is_user_code(path) and not path.startswith(_NOT_USER)


def origin_locations(origin: NodeOrigin) -> tuple[tuple[Location, ...], tuple[Stack, ...]]:
    """The node's user source line as a location, and its whole stack trace as a stack."""
    frames = diagnostics.locations_from_stack_trace(origin.stack_trace)
    stacks = (Stack(frames, "where torch.export saw this operation"),) if frames else ()
    if origin.file is None:
        return (), stacks
    return (Location(origin.file, origin.line, snippet=origin.code or None),), stacks


def _exception_locations(error: BaseException) -> tuple[Location, ...]:
    frames = diagnostics.locations_from_traceback(error.__traceback__, frame_filter=user_frame)
    if not frames:  # dynamo puts the user's frames in the message ("from user code: ...")
        frames = diagnostics.locations_from_stack_trace(str(error), frame_filter=user_frame)
    return frames[-1:] if frames else call_site()


def _specialization_locations(attempt: CaptureAttempt) -> tuple[Location, ...]:
    """The model's lines that fixed a dimension asked to be dynamic (the error names them)."""
    locations = []
    for found in attempt.specializations:
        path, _, line = found.location.rpartition(":")
        full = model_file(path) if path and line.isdigit() else None
        if full is not None:
            message = f"fixes {found.source} to {found.value}"
            locations.append(Location(full, int(line), snippet=found.code or None, message=message))
    return tuple(locations)


def call_site() -> tuple[Location, ...]:
    """Where the user's code called the exporter: the innermost user frame on the stack.

    A failure outside the model's code (dynamic shapes that do not fit the inputs, an
    unsupported input type) has no frame in the model; the call is where to fix it.
    """
    frame: FrameType | None = sys._getframe(1)
    model: torch.nn.Module | None = None
    while frame is not None:
        path = frame.f_code.co_filename
        if user_frame(path):
            line = frame.f_lineno
            snippet = linecache.getline(path, line).strip() or None
            message = "the call that started the export"
            return (Location(path, line, snippet=snippet, message=message),)
        if model is None:
            model = _model_in(frame)
        frame = frame.f_back
    return _model_source(model)  # no user code on the stack: a command-line run


def _model_in(frame: FrameType) -> torch.nn.Module | None:
    """The module an exporter frame is exporting (its ``module`` or ``model`` local)."""
    if not is_exporter_code(frame.f_code.co_filename):
        return None
    for name in ("module", "model"):
        value = frame.f_locals.get(name)
        if isinstance(value, torch.nn.Module):
            return value
    return None


def _model_source(model: torch.nn.Module | None) -> tuple[Location, ...]:
    """Where the model's ``forward`` is defined (the signature the call binds to).

    Only if that is the user's code; not the ``class`` line, which says nothing of inputs.
    """
    if model is None:
        return ()
    forward = getattr(type(model), "forward", None)
    try:
        path = inspect.getsourcefile(forward)  # type: ignore[arg-type]  # None raises TypeError
        lines, line = inspect.getsourcelines(forward)  # type: ignore[arg-type]  # same
    except (OSError, TypeError):  # a forward without a source file
        return ()
    line += next((i for i, t in enumerate(lines) if t.lstrip().startswith("def ")), 0)
    if path is None or not user_frame(path):
        return ()
    snippet = linecache.getline(path, line).strip() or None
    message = "the model exported (the export was started outside Python code of yours)"
    return (Location(path, line, snippet=snippet, message=message),)


def failure_info(error: BaseException) -> ExceptionInfo:
    """The exception that ended an export, without the exporter's own frames.

    The whole message of an :class:`~onnx_export.errors.OnnxExportError` (``str()`` fits
    it to one screen; the report keeps every detail).
    """
    info = ExceptionInfo.from_exception(error, frame_filter=_not_exporter)
    details = getattr(error, "details", None)
    if isinstance(details, str) and details:
        info = dataclasses.replace(info, message=details)
    return info


def _not_exporter(path: str) -> bool:
    """Whether a traceback frame is outside onnx_export's own modules."""
    return not is_exporter_code(path)


def record_capture(
    context: DiagnosticContext, attempts: Sequence[CaptureAttempt], succeeded: bool
) -> None:
    """One result per capture attempt; failures are warnings if a later strategy worked."""
    for attempt in attempts:
        if attempt.succeeded:
            for fix in attempt.shape_fixes:
                dim, _, rest = fix.partition(": ")
                change, _, reason = rest.partition(" (")
                context.emit(
                    rules.DYNAMIC_SHAPE_FIXED,
                    message_args={"dim": dim, "change": change, "reason": reason[:-1]},
                )
            context.emit(
                rules.CAPTURE_SUCCEEDED,
                message_args={"strategy": attempt.strategy, "seconds": f"{attempt.seconds:.2f}"},
            )
            continue
        error = attempt.exception
        assert error is not None
        context.emit(
            rules.CAPTURE_ATTEMPT_FAILED,
            level=Level.WARNING if succeeded else Level.ERROR,
            message_args={
                "strategy": attempt.strategy,
                "exception_type": type(error).__name__,
                "exception_message": explanation(error),
            },
            locations=_specialization_locations(attempt) or _exception_locations(error),
            exception=failure_info(error),
            properties={"seconds": round(attempt.seconds, 3)},
        )
    if attempts:
        record_patches(context, attempts[-1].patches)


def record_patches(context: DiagnosticContext, outcomes: Sequence[PatchOutcome]) -> None:
    """A note listing the capture patches entered, and one per patch skipped, with why."""
    for outcome in outcomes:
        if not outcome.entered:
            context.emit(
                rules.CAPTURE_PATCH_SKIPPED,
                message_args={"patch": outcome.name, "reason": outcome.reason},
            )
    entered = [o.name for o in outcomes if o.entered]
    if entered:
        context.emit(
            rules.CAPTURE_PATCHES,
            message_args={"count": len(entered), "patches": ", ".join(entered)},
            properties={"patches": entered},
        )


def record_decomposition(context: DiagnosticContext, report: DecompositionReport) -> None:
    """A note on what decomposition decomposed and why it ran; none when it did not run."""
    if not report.ran and not report.decomposed:
        return  # every op has an ONNX function: nothing to say
    ops = ", ".join(report.decomposed) or f"none (it ran because {report.why})"
    context.emit(
        rules.DECOMPOSITION,
        message_args={"count": len(report.decomposed), "ops": ops},
        properties={"ran": report.ran, "why": report.why},
    )


def record_dispatch(
    context: DiagnosticContext, decision: Dispatch, node: str, origin: NodeOrigin
) -> None:
    """A note per dispatch decision (verbose), a warning per fallback."""
    if decision.entry is None:
        return
    rule = rules.DISPATCH_FALLBACK if decision.fallback else rules.DISPATCH_DECISION
    if rule is rules.DISPATCH_DECISION and context.options.verbosity > Level.NOTE:
        return  # skip building locations for notes that would be dropped
    locations, _ = origin_locations(origin)
    context.emit(
        rule,
        message_args={
            "op": decision.target,
            "function": decision.entry.name,
            "reason": decision.reason,
        },
        locations=locations,
        properties={"fx_node": node, "module": origin.module_path},
    )


def record_unsupported(
    context: DiagnosticContext, op: str, node: str, origin: NodeOrigin, reason: str
) -> None:
    """An error at the user's line for an op without an ONNX function."""
    locations, stacks = origin_locations(origin)
    context.emit(
        rules.UNSUPPORTED_OP,
        message_args={"op": op, "node": node, "module": origin.module_path or "<root>"},
        locations=locations,
        stacks=stacks,
        properties={"fx_node": node, "module": origin.module_path, "reason": reason},
    )


def write_failure_report(context: DiagnosticContext) -> tuple[pathlib.Path | None, str | None]:
    """Write the report of a failed export: to the configured path, else a temp file.

    Returns the path written, or ``None`` and why the report could not be written (the
    export error says so instead of silently going without a report).
    """
    options = context.options
    if options.write_report == "never":
        return None, None
    path = options.report_path
    chosen = path is not None
    try:
        if path is None:
            folder = reports_folder()
            handle, name = tempfile.mkstemp(prefix="onnx-export-", suffix=".sarif", dir=folder)
            os.close(handle)
            path = name
            _prune(folder, keep=name)
        written = context.write_sarif(path)
        if not chosen:  # a report in the shared temp folder stays readable by its owner only
            written.chmod(0o600)
        return written, None
    except OSError as e:
        where = f" to {path}" if path is not None else ""
        return None, f"The SARIF report could not be written{where}: {e.strerror or e}."


#: How many reports of failed exports the reports folder keeps (the newest).
KEPT_REPORTS = 20


def reports_folder() -> pathlib.Path:
    """Where the reports of failed exports go when no path was chosen.

    ``onnx-export-reports`` in the temp folder, private to its owner; the temp folder
    itself when that cannot be made ours (another user's folder of that name). Only the
    newest :data:`KEPT_REPORTS` are kept there, so failed exports do not pile up.
    """
    base = pathlib.Path(tempfile.gettempdir())
    folder = base / "onnx-export-reports"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        owner = folder.stat().st_uid
    except OSError:
        return base
    if hasattr(os, "getuid") and owner != os.getuid():
        return base
    return folder


def _prune(folder: pathlib.Path, keep: str) -> None:
    """Remove all but the newest :data:`KEPT_REPORTS` reports in ``folder`` (ours only)."""
    if folder == pathlib.Path(tempfile.gettempdir()):
        return  # the shared temp folder: other programs' files are not ours to remove
    reports = []
    for report in folder.glob("onnx-export-*.sarif"):
        try:
            reports.append((report.stat().st_mtime, report))
        except OSError:  # removed meanwhile by a parallel export
            continue
    reports.sort(reverse=True)
    for _, report in reports[KEPT_REPORTS:]:
        if str(report) != keep:
            report.unlink(missing_ok=True)


def write_success_report(context: DiagnosticContext) -> pathlib.Path | None:
    """Write the report of a successful export when asked to (``write_report="always"``)."""
    options = context.options
    if options.write_report != "always" or options.report_path is None:
        return None
    return context.write_sarif(options.report_path)


def record_translation_plan(
    context: DiagnosticContext,
    program: ExportedProgram,
    decisions: Mapping[str, Dispatch],
    unsupported: Sequence[UnsupportedNode],
) -> None:
    """Every node's dispatch decision, and an error per node without an ONNX function."""
    for node in walk_call_nodes(program.graph_module):
        record_dispatch(context, decisions[decision_key(node)], node.name, node_origin(node))
    for u in unsupported:
        record_unsupported(context, u.op, u.node, u.origin, u.reason)


def record_conversion_failure(context: DiagnosticContext, error: NodeTranslationError) -> None:
    """An error at the user's line for the FX node whose ONNX function failed."""
    locations, stacks = origin_locations(error.origin)
    decision = error.decision
    context.emit(
        rules.CONVERSION_FAILED,
        message_args={
            "op": str(error.node.target),
            "node": error.node.name,
            "function": decision.entry.name if decision and decision.entry else "-",
            "exception_message": str(error.__cause__),
        },
        locations=locations,
        stacks=stacks,
        exception=error.__cause__,
    )


def record_dropped_mutations(context: DiagnosticContext, buffers: Sequence[str]) -> None:
    """A warning per buffer mutation the ONNX graph cannot express."""
    for buffer in buffers:
        context.emit(rules.BUFFER_MUTATION, message_args={"buffer": buffer})


def record_merged_dim_names(
    context: DiagnosticContext,
    merged: Sequence[MergedDimName],
    attempts: Sequence[CaptureAttempt],
) -> None:
    """An OXE0020 warning per unused axis name (unless the capture's repair already has one)."""
    repaired = {
        fix.partition(": ")[0]
        for attempt in attempts
        if attempt.succeeded
        for fix in attempt.shape_fixes
    }
    for name in merged:
        if name.axis in repaired:  # Dim('b') -> Dim('a'), reported by record_capture
            continue
        context.emit(
            rules.DYNAMIC_SHAPE_FIXED,
            message_args={
                "dim": name.axis,
                "change": f"{name.name!r} -> {name.kept!r}",
                "reason": f"torch.export found {name.axis} always equal to {name.kept_axis}",
            },
        )


def _guard_reason(guard: RangeGuard) -> str:
    if guard.kind == "size_one":
        return (
            "the model's code compares it with 1, and torch.export traced sizes of 2 or "
            "more (the size-1 branch is not in the file); the file refuses size 1"
        )
    if guard.kind == "example":
        return (
            f"the file differs from eager PyTorch at another size inside torch's range "
            f"({guard.guard}) and no capture at other sizes is right at the example; the "
            "file refuses other sizes"
        )
    if guard.kind == "narrowing":
        return (
            f"torch's code for this line ({guard.guard}) narrows it; the file refuses other sizes"
        )
    return f"a guard in the model's code ({guard.guard}) bounds it; the file refuses other sizes"


def record_guarded_ranges(
    context: DiagnosticContext, guarded: Sequence[tuple[str, str, RangeGuard]]
) -> None:
    """An OXE0020 warning per dynamic axis a guard in the model's code bounded, at its line."""
    for where, text, guard in guarded:
        path, _, line = guard.location.rpartition(":")
        locations = (
            (Location(path, int(line), snippet=guard.code or None),)
            if path and line.isdigit()
            else ()
        )
        context.emit(
            rules.DYNAMIC_SHAPE_FIXED,
            message_args={
                "dim": where,
                "change": f"dynamic -> dynamic in {text}",
                "reason": _guard_reason(guard),
            },
            locations=locations,
        )


def record_resized_capture(context: DiagnosticContext, sizes: str, why: str) -> None:
    """An OXE0020 warning: the model was captured at other example sizes, and why."""
    context.emit(
        rules.DYNAMIC_SHAPE_FIXED,
        message_args={
            "dim": sizes.split(":", maxsplit=1)[0],
            "change": f"captured at other example sizes ({sizes})",
            "reason": why,
        },
    )


def record_held_sizes(context: DiagnosticContext, held: Sequence[Any], *, proved: bool) -> None:
    """An OXE0020 warning per node holding an example size of a dynamic axis, not run."""
    for found in held[:10]:
        path, _, line = str(found.where).rpartition(":")
        locations = (Location(path, int(line)),) if path and line.isdigit() else ()
        context.emit(
            rules.DYNAMIC_SHAPE_FIXED,
            message_args={
                "dim": found.axes,
                "change": f"node {found.node} ({found.op}) holds {found.value}",
                "reason": "the example's size of a dynamic axis, maybe baked in"
                + ("" if proved else "; the model is too large to run at a second size here"),
            },
            locations=locations,
        )


def record_unproved_axes(context: DiagnosticContext, problem: str) -> None:
    """An OXE0020 warning: the graph differs from eager at other sizes, no node to blame."""
    context.emit(
        rules.DYNAMIC_SHAPE_FIXED,
        message_args={
            "dim": problem.split(":", maxsplit=1)[0].removeprefix("at "),
            "change": "not proved at other sizes",
            "reason": f"{problem}, and no node holds the example's sizes: compare the saved "
            "file with the model at the sizes you need",
        },
    )
