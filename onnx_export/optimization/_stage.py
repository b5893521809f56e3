"""The optimization stage: the translated model made lean, then put at the asked opset.

onnxscript's optimizer, the weight folds, the bool legalisation, the opset conversion, the
GELU fusion, (``target="onnxruntime"``) ONNX Runtime's fused ops and (``dtype``) softmax and
reductions in float32, in that order; each pass
that changes the model is a note in the export's ``DiagnosticContext``. Below opset 18 the
model is converted down last (``downgrade``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import onnx_ir as ir

from onnx_export._options import ExportOptions
from onnx_export.diagnostics import DiagnosticContext, rules
from onnx_export.errors import ConversionError, OptimizationError
from onnx_export.passes import (
    compute_in_float32,
    convert_opset,
    fold_batch_norm_into_conv,
    fold_weight_computations,
    fold_weight_transforms,
    fuse_for_onnxruntime,
    fuse_gelu,
    legalize_bool_data,
    optimize_model,
    remove_identity_reshapes,
)
from onnx_export.passes.downgrade import OpsetDowngradeError, downgrade_opset
from onnx_export.passes.mark_folded_weights import mark_folded_weights, marked_weights

__all__ = ["downgrade", "optimize"]


#: Times a named stage of the export (the exporter's ``StageTimer.stage``).
Timer = Callable[[str], AbstractContextManager[None]]


def _untimed(name: str) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


def optimize(
    model: Any, options: ExportOptions, context: DiagnosticContext, stage: Timer = _untimed
) -> None:
    """Run the optimization passes ``options`` ask for on ``model``, in place.

    ``stage(name)`` times each part: ``optimizer``, ``folding``, ``opset`` (bool
    legalisation, opset conversion, GELU fusion) and ``ort_target``.
    """
    if options.optimize:
        with stage("folding"):  # weight-only chains first: the optimizer sees fewer nodes
            _fold(model, context, _EARLY_FOLDS)
        with stage("optimizer"):
            _optimizer(model, context)
        with stage("folding"):
            _fold(model, context, _FOLDS)
    with stage("opset"):
        _legalize_and_convert(model, options, context)
    if options.target == "onnxruntime":
        with stage("ort_target"):
            _fuse_for_onnxruntime(model, context)
    if options.dtype is not None:  # after the fusions, whose patterns know no Casts
        with stage("opset"):
            _fold(model, context, (("compute_in_float32", compute_in_float32),))
    import_node_domains(model)


def import_node_domains(model: ir.Model) -> None:
    """Give every domain a node of ``model`` uses an opset import (version 1 if unknown).

    Nodes of other domains (``com.microsoft``'s ``GroupQueryAttention`` of the fused
    decoder, a user's custom op) need the import for the checker and ONNX Runtime; it
    used to come only from the fusion pass that happened to add one.

    Example:
        >>> node = ir.Node("com.microsoft", "Gelu", [])
        >>> m = ir.Model(ir.Graph([], [], nodes=[node]), ir_version=10)
        >>> import_node_domains(m)
        >>> m.opset_imports["com.microsoft"]
        1
    """
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in model.opset_imports:
            version = node.version if node.version is not None else 1
            model.opset_imports[node.domain] = version
            model.graph.opset_imports[node.domain] = version


def _optimizer(model: Any, context: DiagnosticContext) -> None:
    weights = marked_weights(model.graph)
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
    mark_folded_weights(model.graph, weights)  # so that `info` counts them as parameters
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


def _fold(
    model: Any, context: DiagnosticContext, folds: tuple[tuple[str, Callable[[Any], int]], ...]
) -> None:
    for name, apply in folds:
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


def _legalize_and_convert(model: Any, options: ExportOptions, context: DiagnosticContext) -> None:
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
        if fuse_gelu(model):
            context.emit(
                rules.OPTIMIZER_PASS,
                message_args={
                    "pass_name": "fuse_gelu",
                    "nodes_before": nodes,
                    "nodes_after": model.graph.num_nodes(),
                },
            )


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


#: Before the optimizer: computations on weights only (NF-ResNet's weight standardisation
#: was 316 FX nodes, 877 translated ones, that the optimizer reduced before the fold, #22).
_EARLY_FOLDS: tuple[tuple[str, Callable[[Any], int]], ...] = (
    ("fold_weight_transforms (before the optimizer)", fold_weight_transforms),
    ("fold_weight_computations (before the optimizer)", fold_weight_computations),
)

#: Passes after the optimizer that fold weights into new (lazily computed) initializers.
_FOLDS: tuple[tuple[str, Callable[[Any], int]], ...] = (
    ("fold_batch_norm_into_conv", fold_batch_norm_into_conv),
    ("fold_weight_transforms", fold_weight_transforms),
    ("fold_weight_computations", fold_weight_computations),
)


def downgrade(model: ir.Model, opset_version: int) -> ir.Model:
    """``model`` at ``opset_version`` when that is below 18 (13 to 17)."""
    if opset_version >= 18:
        return model
    try:
        return downgrade_opset(model, opset_version)
    except OpsetDowngradeError as e:
        raise ConversionError(str(e)) from e
