"""``dynamo_export``: capture -> decompose -> translate -> optimize -> ``ONNXProgram``.

Each export owns one ``DiagnosticContext``; every stage records into it, and a failed
export writes it as a SARIF report whose path the exception carries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from onnx_export._heap import older_objects_frozen
from onnx_export._options import ExportOptions, is_default_opset
from onnx_export._registry import OnnxRegistry
from onnx_export.adapters import AdapterError
from onnx_export.capture._call import (
    Call,
    as_module,
    capture_call,
    capture_error,
    forward_signature,
    made_static,
    made_static_refused,
    prepare_call,
    range_guards,
    warn_guarded_ranges,
    warn_made_static,
)
from onnx_export.capture._containers import register_library_containers
from onnx_export.capture._decomp import decompose
from onnx_export.capture._devices import explain_device_mismatch
from onnx_export.capture._half import half_precision_call
from onnx_export.capture._onnx_flag import onnx_export_flag
from onnx_export.capture._resize import resized_call
from onnx_export.capture._strategies import EXPORT_LOCK, CaptureAttempt
from onnx_export.diagnostics import DiagnosticContext, Location, rules
from onnx_export.errors import ConversionError, ExportInputError, OnnxExportError
from onnx_export.optimization._stage import downgrade, optimize
from onnx_export.program._adapter import (
    build_spec,
    size_one_candidates,
    with_axis_ranges,
    with_cast_from,
    with_made_static,
)
from onnx_export.program._conditions import with_conditions
from onnx_export.program._parity import (
    ParityOutcome,
    check_parity,
    record_parity,
    record_parity_failed,
    record_parity_skipped,
    record_training_mode,
    verification_error,
    warn_parity,
    warn_training,
)
from onnx_export.program._probe import (
    ProbeMismatch,
    probe_and_record,
    probe_wanted,
    warn_probe,
)
from onnx_export.program._program import ONNXProgram
from onnx_export.program._relations import (
    FoundRelation,
    find_relations,
    record_relations,
    warn_relations,
    with_relations,
)
from onnx_export.program._serve import serve_dynamic_axes
from onnx_export.program._served_axes import example_sizes
from onnx_export.reporting import _records as _report
from onnx_export.reporting._timing import StageTimer, record_stage_times
from onnx_export.reporting._torch_output import record_torch_output
from onnx_export.translation._graph_io import name_graph_io
from onnx_export.translation._naming import MergedDimName, warn_merged_dim_names
from onnx_export.translation._stage import (
    conversion_error,
    required_opset,
    translate_program,
    unsupported_error,
)
from onnx_export.translation._translate import NodeTranslationError, find_unsupported

__all__ = ["dynamo_export"]

_LOG = logging.getLogger("onnx_export")


def _translate(
    program: ExportedProgram,
    registry: OnnxRegistry,
    context: DiagnosticContext,
    module: torch.nn.Module,
    call: Call,
    options: ExportOptions,
    timer: StageTimer,
) -> Any:
    with timer.stage("translation"):
        decisions, unsupported = find_unsupported(program.graph_module, registry)
    with timer.stage("report"):
        _report.record_translation_plan(context, program, decisions, unsupported)
    if unsupported:
        raise unsupported_error(unsupported)
    try:
        with timer.stage("translation"):
            result = translate_program(
                program, decisions, module, call.shapes, options.opset_version, options.target
            )
    except NodeTranslationError as e:
        _report.record_conversion_failure(context, e)
        raise conversion_error(e) from e.__cause__
    _report.record_dropped_mutations(context, result.dropped_buffer_mutations)
    return result


def _capture(
    module: torch.nn.Module,
    given: ExportedProgram | None,
    call: Call,
    options: ExportOptions,
    context: DiagnosticContext,
) -> tuple[ExportedProgram, list[CaptureAttempt], Call]:
    """The program, every attempt, and the call it was captured with.

    When the model's code seems to fix a dynamic dimension (refused, or made static
    under ``allow_static_fallback``), the capture is tried again at other example sizes:
    the size may only have coincided with another one (a batch of 10 beside
    ``x.view(x.size(1), -1)``); so is a capture that failed with a dynamic size of 1 in the
    example. The first outcome stands when that fails.
    """
    if given is not None:
        if call.shapes is not None:
            raise ExportInputError(
                "dynamic_shapes (or dynamic_axes) apply when the model is captured, and an "
                "ExportedProgram is already captured: its dynamic dimensions are the ones it "
                "was exported with. Drop the option, or pass dynamic_shapes to "
                "torch.export.export, or pass the nn.Module instead."
            )
        return given, [], call
    program, attempts = capture_call(call, options)
    used = call
    lost = made_static_refused(attempts) if program is None else bool(made_static(attempts))
    # A size-1 example traced size-obliviously can fail in torch's own code (a sliding
    # window's mask over one token): other sizes may capture, and the checks that follow
    # prove that capture at the example (or capture again keeping its comparisons).
    lost = lost or (program is None and bool(call.size_one))
    resized = resized_call(call) if lost else None
    if resized is not None:
        again, more = capture_call(resized.call, options)
        if again is not None and not made_static(more):
            program, used = again, resized.call
            attempts = [*attempts, *more]
            why = "the capture at the example's sizes made a dynamic dimension static"
            _report.record_resized_capture(context, resized.text(), why)
    _report.record_capture(context, attempts, program is not None)
    if program is None:
        raise capture_error(attempts, call)
    return program, attempts, used


@dataclasses.dataclass
class _Built:
    """One capture turned into an ``ONNXProgram``, with what to warn about afterwards."""

    program: ONNXProgram
    merged: tuple[MergedDimName, ...]
    guarded: tuple[Any, ...]
    parity: ParityOutcome | None = None
    relations: tuple[FoundRelation, ...] = ()
    probe: tuple[ProbeMismatch, ...] = ()
    size_one: tuple[Any, ...] = ()


def _program_of(built: _Built) -> ONNXProgram:
    return built.program


def _add_guarded(built: _Built, pinned: Sequence[tuple[str, str, Any]]) -> None:
    """Axes the served-axes check pinned to the example's size: warned like a guard's range."""
    built.guarded += tuple(pinned)


def _build(
    program: ExportedProgram,
    attempts: list[CaptureAttempt],
    call: Call,
    example: tuple[tuple[Any, ...], dict[str, Any]],
    options: ExportOptions,
    context: DiagnosticContext,
    timer: StageTimer,
    eager_model: torch.nn.Module | None,
    relations: Sequence[FoundRelation] = (),
) -> _Built:
    """Decompose, translate, describe the inputs and outputs, optimize: the ONNX program.

    ``eager_model`` is the user's module (None for an ``ExportedProgram``): the parity
    check and ``verify`` run it as the reference.
    """
    registry = options.onnx_registry or OnnxRegistry()
    model_args, model_kwargs = example
    with timer.stage("decomposition"):
        program, report = decompose(program, registry, always=options.decompose == "always")
    _report.record_decomposition(context, report)
    options = _opset_for(program, options)
    result = _translate(program, registry, context, call.module, call, options, timer)
    _report.record_merged_dim_names(context, result.merged_dim_names, attempts)
    name_graph_io(result.model.graph, result.user_outputs, call, options)
    try:
        with timer.stage("adapter"):
            spec = build_spec(
                call.signature,
                model_args,
                model_kwargs,
                program,
                result.model,
                result.user_outputs,
            )
            spec = with_made_static(spec, made_static(attempts))
            example_dims = {n: size for n, (size, _) in example_sizes(spec, call).items()}
            spec, checked = with_conditions(
                spec, result.model, range_guards(attempts), example_dims
            )
            names = call.shapes.names if call.shapes is not None else None
            spec, guarded = with_axis_ranges(
                spec, result.model, names, range_guards(attempts), checked
            )
            size_one = size_one_candidates(result.model, range_guards(attempts), spec)
            spec = with_cast_from(spec, options.dtype)
            spec = with_relations(spec, relations)
    except AdapterError as e:
        raise ConversionError(
            f"The model's inputs or outputs cannot be described for ONNX callers: {e}"
        ) from e
    optimize(result.model, options, context, timer.stage)
    with timer.stage("opset"):
        onnx_model = downgrade(result.model, options.opset_version)
    onnx_program = ONNXProgram(
        onnx_model,
        program,
        capture_attempts=attempts,
        signature=call.signature,
        diagnostic_context=context,
        decisions=result.decisions,
        adapter_spec=spec,
        eager_model=eager_model,
    )
    return _Built(
        onnx_program,
        result.merged_dim_names,
        tuple(guarded),
        relations=tuple(relations),
        size_one=size_one,
    )


def _pipeline(
    model: torch.nn.Module | ExportedProgram | Callable[..., Any],
    model_args: tuple[Any, ...],
    model_kwargs: dict[str, Any],
    options: ExportOptions,
    context: DiagnosticContext,
    timer: StageTimer,
) -> _Built:
    """The export; with what to warn about after recording (axis names, ranges, parity)."""
    module, given = as_module(model)
    if given is not None and not model_args and not model_kwargs:
        model_args, model_kwargs = given.example_inputs or ((), {})
    signature = forward_signature(module)
    register_library_containers(model_args, model_kwargs)  # transformers caches
    if options.dtype is not None:
        if given is not None:
            raise ExportInputError(
                f"ExportOptions(dtype={options.dtype!r}) converts the model before capture, "
                "and an ExportedProgram is already captured. Pass the nn.Module, or capture "
                "the converted model yourself and drop dtype."
            )
        module, model_args, model_kwargs = half_precision_call(
            module, model_args, model_kwargs, str(options.dtype)
        )
    call = prepare_call(module, signature, model_args, model_kwargs, options)
    with (
        timer.stage("capture"),
        explain_device_mismatch(module, model_args, model_kwargs),
        onnx_export_flag(),  # torch.onnx.is_in_onnx_export() is True for the model's code
    ):
        program, attempts, used = _capture(module, given, call, options, context)
    example = (model_args, dict(model_kwargs))
    eager = module if given is None else None
    found = _relations(program, used) if given is None else []
    if found:
        ties = tuple(f.tie for f in found)
        call, used = (dataclasses.replace(c, ties=ties) for c in (call, used))
        record_relations(context, found)
    built = _build(program, attempts, used, example, options, context, timer, eager, found)
    if given is None and call.shapes is not None:

        def recapture(other: Call) -> _Built | None:
            with onnx_export_flag():
                again, more = capture_call(other, options)
            if again is None or made_static(more):
                return None
            relations = _relations(again, other)
            return _build(again, more, other, example, options, context, timer, eager, relations)

        with timer.stage("dynamic axes"):
            built = serve_dynamic_axes(
                built, _program_of, call, recapture, context, on_pinned=_add_guarded
            )
    built.parity = _parity(built.program, model_args, model_kwargs, options, context, timer)
    built.program._eager_hint = None  # the served check's outputs, lent to parity: done
    if probe_wanted(built.parity.result, options.verify):
        with timer.stage("edge probe"):  # the smallest sizes, fully masked rows
            mismatches, refused = probe_and_record(built.program, call, context, built.size_one)
        built.probe = tuple(mismatches)
        built.guarded += refused  # the size-1 branches the probe proved missing: refused
    # Unprobed size-1 comparisons (a large model) are not refused: transformers compares
    # sizes with 1 where both branches agree, and a decoder must take one token.
    _report.record_guarded_ranges(context, built.guarded)
    return built


def _relations(program: ExportedProgram, call: Call) -> list[FoundRelation]:
    """The linear relations the captured program holds between the user's dynamic axes."""
    if call.shapes is None:
        return []
    found, _ = find_relations(program, call.module, call.shapes.names)
    return found


def _opset_for(program: ExportedProgram, options: ExportOptions) -> ExportOptions:
    """Raise an opset left at its default to the one the model's dtypes need (float4: 23).

    An opset the user chose is kept; translation then refuses what it cannot hold.
    """
    needed = required_opset(program)
    if needed is None or options.opset_version >= needed:
        return options
    if not is_default_opset(options.opset_version):
        return options
    _LOG.info(
        "The model has float4 tensors, which ONNX has from opset %d on: exporting at opset "
        "%d instead of the default %d.",
        needed,
        needed,
        options.opset_version,
    )
    return dataclasses.replace(options, opset_version=needed)


def _parity(
    program: ONNXProgram,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: ExportOptions,
    context: DiagnosticContext,
    timer: StageTimer,
) -> ParityOutcome:
    """The parity check (``verify``: None runs it where cheap, True always, False never)."""
    half = options.dtype is not None
    if options.verify is False:
        outcome = ParityOutcome(None, "ExportOptions(verify=False)", tuple(program._training()))
    else:
        with timer.stage("verify"):
            outcome = _checked(program, args, kwargs, forced=options.verify is True, half=half)
    record_training_mode(context, outcome.training)
    result = outcome.result
    if outcome.failed:
        record_parity_failed(context, outcome.failed)
    elif result is None:
        record_parity_skipped(context, outcome.skipped)
    elif options.verify is True:
        program._record_verification(result)
        if not result.ok:
            raise verification_error(result)
    else:
        record_parity(context, result)
    return outcome


def _checked(
    program: ONNXProgram,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    forced: bool,
    half: bool,
) -> ParityOutcome:
    """The check; when it runs by default, a failure of its own only skips it (said why)."""
    if forced:
        return check_parity(program, args, kwargs, forced=True, half=half)
    try:
        return check_parity(program, args, kwargs, forced=False, half=half)
    except OnnxExportError:
        raise  # an invalid graph: the file would be refused
    except Exception as e:
        reason = f"it raised {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        return ParityOutcome(None, reason, tuple(program._training()))


@contextlib.contextmanager
def _recording(context: DiagnosticContext) -> Iterator[None]:
    # Warnings filters, logging handlers and torch.export's mode stack are process-global:
    # one export at a time records them, so each report holds only its own.
    with (
        EXPORT_LOCK,
        older_objects_frozen(),  # full collections walk the export's objects, not the heap
        context.record_python_warnings(library_paths=_report.LIBRARY_PATHS),
        context.record_log_records(_report.LOGGERS),
        record_torch_output(context),  # torch's logs and prints: the report, not stderr
    ):
        yield


def _fail(error: OnnxExportError, context: DiagnosticContext) -> OnnxExportError:
    first = (str(error).strip().splitlines() or [""])[0]
    context.emit(
        rules.EXPORT_FAILED,
        message_args={"stage": error.stage, "exception_message": first},
        locations=_failure_location(error, context),
    )
    context.finish(success=False, exception=_report.failure_info(error))
    error.diagnostic_context = context
    error.report_path, error.report_problem = _report.write_failure_report(context)
    return error


def _failure_location(error: OnnxExportError, context: DiagnosticContext) -> tuple[Location, ...]:
    """The user's line that caused the failure.

    The error's own, else an earlier error's, else (inputs that do not fit the model) the
    call that passed them.
    """
    source = error.source
    if source is not None:
        return (Location(source.path, source.line, snippet=source.code or None),)
    found = _first_error_location(context)
    if not found and error.stage == "input":
        found = _report.call_site()
    return found


def _first_error_location(context: DiagnosticContext) -> tuple[Location, ...]:
    for diagnostic in context.errors():
        if diagnostic.locations:
            return diagnostic.locations[:1]
    return ()


def dynamo_export(
    model: torch.nn.Module | ExportedProgram | Callable[..., Any],
    /,
    *model_args: Any,
    export_options: ExportOptions | None = None,
    **model_kwargs: Any,
) -> ONNXProgram:
    """Export a PyTorch model to ONNX through torch.export and onnxscript's torchlib.

    Args:
        model: The ``nn.Module`` (or a plain function) to export, or an
            ``ExportedProgram`` already captured (then no capture runs, and the example
            inputs default to the program's own).
        *model_args: Example positional inputs, as you would call the model; the
            program is captured with this very call, so ``exported_program.module()``
            takes it too.
        export_options: How to capture, translate and optimize; defaults apply if None.
        **model_kwargs: Example keyword inputs.

    Returns:
        The :class:`ONNXProgram`; ``.save(path)`` writes it, calling it runs ONNX Runtime.

    Raises:
        CaptureError: torch.export failed with every capture strategy.
        UnsupportedOpsError: Some operators have no ONNX function (all are listed).
        ConversionError: An ONNX function failed on a node.
        OptimizationError: The optimizer failed.
        OnnxExportError: Errors were recorded (e.g. a warning under
            ``warnings_as_errors``). Every failure writes a SARIF report first, whose
            path is in the message and in ``error.report_path``.

    Example:
        >>> import torch, onnx_export
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
        >>> program = onnx_export.dynamo_export(model, torch.randn(3, 4))
        >>> x = torch.randn(3, 4)
        >>> torch.allclose(program(x), model(x), atol=1e-5)
        True
    """
    options = export_options or ExportOptions()
    context = _report.new_context(options.diagnostic_options)
    timer = StageTimer()
    try:
        with _recording(context):
            built = _pipeline(model, model_args, dict(model_kwargs), options, context, timer)
            program = built.program
        if context.has_errors():
            errors = "; ".join(d.message for d in context.errors()[:3])
            raise OnnxExportError(
                f"The export recorded errors: {errors}. With warnings_as_errors=True every "
                "warning counts; set it to False or address the warnings listed."
            )
    except OnnxExportError as e:
        raise _fail(e, context) from e.__cause__
    except Exception as e:
        error = OnnxExportError(f"The export failed unexpectedly: {type(e).__name__}: {e}")
        raise _fail(error, context) from e
    record_stage_times(context, timer.times, timer.total())
    context.finish(success=True)
    _report.write_success_report(context)
    program.stage_times.update(timer.times, total=timer.total())
    warn_made_static(program.capture_attempts)  # after recording, where the user sees it
    warn_merged_dim_names(built.merged)
    warn_guarded_ranges(built.guarded)
    warn_relations(built.relations)
    if built.parity is not None:
        warn_training(built.parity.training)
        warn_parity(built.parity)
    warn_probe(list(built.probe))
    return program
