"""``dynamo_export``: capture -> decompose -> translate -> optimize -> ``ONNXProgram``.

Each export owns one ``DiagnosticContext``; every stage records into it, and a failed
export writes it as a SARIF report whose path the exception carries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from onnx_export import _report
from onnx_export._adapter import build_spec
from onnx_export._call import (
    Call,
    as_module,
    capture_call,
    capture_error,
    downgrade,
    forward_signature,
    name_graph_io,
    prepare_call,
)
from onnx_export._capture import EXPORT_LOCK
from onnx_export._containers import register_library_containers
from onnx_export._decomp import decompose
from onnx_export._devices import explain_device_mismatch
from onnx_export._naming import dim_names_from_program, graph_names
from onnx_export._options import ExportOptions
from onnx_export._program import ONNXProgram
from onnx_export._registry import OnnxRegistry
from onnx_export._source import node_origin
from onnx_export._translate import (
    NodeTranslationError,
    UnsupportedNode,
    decision_key,
    find_unsupported,
    translate,
    walk_call_nodes,
)
from onnx_export.adapters import AdapterError
from onnx_export.diagnostics import DiagnosticContext, Location, rules
from onnx_export.errors import (
    ConversionError,
    ExportInputError,
    OnnxExportError,
    OptimizationError,
    UnsupportedOpsError,
    VerificationError,
)
from onnx_export.passes import (
    convert_opset,
    fold_batch_norm_into_conv,
    fold_weight_transforms,
    fuse_erf_gelu,
    fuse_for_onnxruntime,
    legalize_bool_data,
    optimize_model,
    remove_identity_reshapes,
)

__all__ = ["dynamo_export"]


def _unsupported_error(unsupported: Sequence[UnsupportedNode]) -> UnsupportedOpsError:
    ops = sorted({u.op for u in unsupported})
    lines = [
        f"  - {u.op} (FX node {u.node!r}, module {u.origin.module_path or '<root>'!r}) "
        f"at {u.origin.where}" + (f": {u.origin.code}" if u.origin.code else "")
        for u in unsupported
    ]
    return UnsupportedOpsError(
        f"{len(ops)} operator(s) have no ONNX function: {', '.join(ops)}.\n"
        + "\n".join(lines)
        + "\nNext steps: register an onnxscript function for each with "
        "OnnxRegistry.register_op(...) and pass it as ExportOptions(onnx_registry=...).",
        unsupported=tuple(
            (u.op, u.node, u.origin.module_path, u.origin.where) for u in unsupported
        ),
    )


def _translate(
    program: ExportedProgram,
    registry: OnnxRegistry,
    context: DiagnosticContext,
    module: torch.nn.Module,
    user_dynamic: Any,
    opset_version: int = 18,
) -> Any:
    decisions, unsupported = find_unsupported(program.graph_module, registry)
    for node in walk_call_nodes(program.graph_module):
        _report.record_dispatch(
            context, decisions[decision_key(node)], node.name, node_origin(node)
        )
    for u in unsupported:
        _report.record_unsupported(context, u.op, u.node, u.origin, u.reason)
    if unsupported:
        raise _unsupported_error(unsupported)
    paths, input_names, output_names = graph_names(module, program)
    names = user_dynamic.names if user_dynamic is not None else None
    dim_names = dim_names_from_program(program, names, paths)
    try:
        result = translate(
            program,
            decisions,
            input_names=input_names,
            output_names=output_names,
            dim_names=dim_names,
            opset_version=opset_version,
        )
    except NodeTranslationError as e:
        locations, stacks = _report.origin_locations(e.origin)
        function = e.decision.entry.name if e.decision and e.decision.entry else "-"
        context.emit(
            rules.CONVERSION_FAILED,
            message_args={
                "op": str(e.node.target),
                "node": e.node.name,
                "function": function,
                "exception_message": str(e.__cause__),
            },
            locations=locations,
            stacks=stacks,
            exception=e.__cause__,
        )
        raise ConversionError(
            f"Translating FX node {e.node.name!r} ({e.node.target}) at {e.origin.where} with "
            f"{function} failed: {e.__cause__}. Next steps: register your own ONNX function "
            "for this op with OnnxRegistry.register_op, or rewrite the line above."
        ) from e.__cause__
    except NotImplementedError as e:
        raise ConversionError(
            f"This graph uses something ONNX export does not support: {e}."
        ) from e
    for buffer in result.dropped_buffer_mutations:
        context.emit(rules.BUFFER_MUTATION, message_args={"buffer": buffer})
    return result


def _optimize(model: Any, options: ExportOptions, context: DiagnosticContext) -> None:
    if options.optimize:
        try:
            before, after = optimize_model(model)
        except Exception as e:
            context.emit(
                rules.OPTIMIZATION_FAILED, message_args={"exception_message": str(e)}, exception=e
            )
            raise OptimizationError(
                f"onnxscript's optimizer failed: {type(e).__name__}: {e}. "
                "Export with ExportOptions(optimize=False) to get the unoptimized model."
            ) from e
        context.emit(
            rules.OPTIMIZER_PASS,
            message_args={
                "pass_name": "onnxscript.optimizer.optimize",
                "nodes_before": before,
                "nodes_after": after,
            },
        )
        removed = remove_identity_reshapes(model)
        if removed:
            context.emit(
                rules.OPTIMIZER_PASS,
                message_args={
                    "pass_name": "remove_identity_reshapes",
                    "nodes_before": after,
                    "nodes_after": after - removed,
                },
            )
        for name, apply in _FOLDS:
            nodes = model.graph.num_nodes()
            changed = apply(model)
            if changed:
                context.emit(
                    rules.OPTIMIZER_PASS,
                    message_args={
                        "pass_name": name,
                        "nodes_before": nodes,
                        "nodes_after": model.graph.num_nodes(),
                    },
                )
    legalized = legalize_bool_data(model)
    if legalized:
        nodes = model.graph.num_nodes()
        context.emit(
            rules.OPTIMIZER_PASS,
            message_args={
                "pass_name": "legalize_bool_data (bool Where/Max/Min/Clip through INT32)",
                "nodes_before": nodes - 2 * legalized,
                "nodes_after": nodes,
            },
        )
    convert_opset(model, max(options.opset_version, 18))  # below 18: see _downgrade
    if options.optimize:
        nodes = model.graph.num_nodes()
        if fuse_erf_gelu(model):
            context.emit(
                rules.OPTIMIZER_PASS,
                message_args={
                    "pass_name": "fuse_erf_gelu",
                    "nodes_before": nodes,
                    "nodes_after": model.graph.num_nodes(),
                },
            )
    if options.target == "onnxruntime":
        _fuse_for_onnxruntime(model, context)


def _fuse_for_onnxruntime(model: Any, context: DiagnosticContext) -> None:
    nodes = model.graph.num_nodes()
    try:
        applied = fuse_for_onnxruntime(model)
    except Exception as e:
        context.emit(
            rules.OPTIMIZATION_FAILED, message_args={"exception_message": str(e)}, exception=e
        )
        raise OptimizationError(
            f"ONNX Runtime's fusions (target='onnxruntime') failed: {type(e).__name__}: {e}. "
            "Export with the default target to get a standard ONNX model."
        ) from e
    fusions = ", ".join(f"{name} x{count}" for name, count in applied.items()) or "none"
    context.emit(
        rules.OPTIMIZER_PASS,
        message_args={
            "pass_name": f"onnxruntime fusions ({fusions})",
            "nodes_before": nodes,
            "nodes_after": model.graph.num_nodes(),
        },
    )


#: Passes after the optimizer that fold weights into new (lazily computed) initializers.
_FOLDS: tuple[tuple[str, Callable[[Any], int]], ...] = (
    ("fold_batch_norm_into_conv", fold_batch_norm_into_conv),
    ("fold_weight_transforms", fold_weight_transforms),
)


def _capture(
    module: torch.nn.Module,
    given: ExportedProgram | None,
    call: Call,
    options: ExportOptions,
    context: DiagnosticContext,
) -> Any:
    if given is not None:
        if call.shapes is not None:
            raise ExportInputError(
                "dynamic_shapes (or dynamic_axes) apply when the model is captured, and an "
                "ExportedProgram is already captured: its dynamic dimensions are the ones it "
                "was exported with. Drop the option, or pass dynamic_shapes to "
                "torch.export.export, or pass the nn.Module instead."
            )
        return given, []
    program, attempts = capture_call(call, options)
    _report.record_capture(context, attempts, program is not None)
    if program is None:
        raise capture_error(attempts, call)
    return program, attempts


def _pipeline(
    model: torch.nn.Module | ExportedProgram | Callable[..., Any],
    model_args: tuple[Any, ...],
    model_kwargs: dict[str, Any],
    options: ExportOptions,
    context: DiagnosticContext,
) -> ONNXProgram:
    registry = options.onnx_registry or OnnxRegistry()
    module, given = as_module(model)
    if given is not None and not model_args and not model_kwargs:
        model_args, model_kwargs = given.example_inputs or ((), {})
    signature = forward_signature(module)
    register_library_containers(model_args, model_kwargs)  # transformers caches
    call = prepare_call(module, signature, model_args, model_kwargs, options)
    with explain_device_mismatch(module, model_args, model_kwargs):  # meta + real
        program, attempts = _capture(module, given, call, options, context)
    program, report = decompose(program, registry, always=options.decompose == "always")
    _report.record_decomposition(context, report)
    result = _translate(program, registry, context, module, call.shapes, options.opset_version)
    name_graph_io(result.model.graph, result.user_outputs, call, options)
    try:
        spec = build_spec(
            signature, model_args, model_kwargs, program, result.model, result.user_outputs
        )
    except AdapterError as e:
        raise ConversionError(
            f"The model's inputs or outputs cannot be described for ONNX callers: {e}"
        ) from e
    _optimize(result.model, options, context)
    onnx_program = ONNXProgram(
        downgrade(result.model, options.opset_version),
        program,
        capture_attempts=attempts,
        signature=signature,
        diagnostic_context=context,
        decisions=result.decisions,
        adapter_spec=spec,
    )
    if options.verify:
        _verify(onnx_program, model_args, model_kwargs)
    return onnx_program


def _verify(program: ONNXProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    verdict = program.verify(*args, **kwargs)
    if verdict.ok:
        return
    culprit = verdict.culprit
    where = (
        f" The first node that diverges is {culprit.node} ({culprit.op}, translated by "
        f"{culprit.function}) at {culprit.origin.where}."
        if culprit
        else ""
    )
    bad = ", ".join(
        f"{o.name} (max abs error {o.max_abs_error:.3g})" for o in verdict.outputs if not o.ok
    )
    raise VerificationError(
        f"ONNX Runtime's outputs differ from PyTorch's: {bad}.{where} Next steps: check the "
        "ONNX function used for that op, or register a correct one with "
        "OnnxRegistry.register_op."
    )


@contextlib.contextmanager
def _recording(context: DiagnosticContext) -> Iterator[None]:
    # Warnings filters, logging handlers and torch.export's mode stack are process-global:
    # one export at a time records them, so each report holds only its own.
    with (
        EXPORT_LOCK,
        context.record_python_warnings(library_paths=_report.LIBRARY_PATHS),
        context.record_log_records(_report.LOGGERS),
    ):
        yield


def _fail(error: OnnxExportError, context: DiagnosticContext) -> OnnxExportError:
    first = (str(error).strip().splitlines() or [""])[0]
    context.emit(
        rules.EXPORT_FAILED,
        message_args={"stage": error.stage, "exception_message": first},
        locations=_first_error_location(context),
    )
    context.finish(success=False, exception=_report.failure_info(error))
    error.diagnostic_context = context
    error.report_path, error.report_problem = _report.write_failure_report(context)
    return error


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
    try:
        with _recording(context):
            program = _pipeline(model, model_args, dict(model_kwargs), options, context)
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
    context.finish(success=True)
    _report.write_success_report(context)
    return program
