"""Inference ``BatchNormalization`` after a ``Conv`` folded into the Conv's weight and bias.

``BN(Conv(x, W, b))`` with constant statistics is ``Conv(x, W * k, (b - mean) * k + beta)``
where ``k = gamma / sqrt(var + eps)`` per output channel. The new weight and bias are
lazily computed initializers (:func:`~onnx_export.passes.fold_weights.derived_initializer`)
named ``<conv weight>.fold(<bn>)``: nothing is computed before the model is serialized,
and a model saved with ``model_state`` folds the weights it is given.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_export.passes.fold_weights import derived_initializer

__all__ = ["fold_batch_norm_into_conv"]


def _module(value: ir.Value | None) -> str:
    """``features.1`` for ``features.1.weight``: the module a BatchNorm weight belongs to."""
    name = str(value.name if value is not None else "bn")
    return name.rsplit(".", 1)[0] if "." in name else name


def _scale(arrays: list[np.ndarray | None], epsilon: float) -> np.ndarray:
    gamma, _, _, var = arrays[-4:]
    assert gamma is not None and var is not None
    return (gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)).astype(
        gamma.dtype
    )


def _statistics_constant(node: ir.Node) -> bool:
    """Whether ``node`` is an inference BatchNormalization with constant parameters."""
    if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx"):
        return False
    if len(node.outputs) != 1 or node.attributes.get_int("training_mode", False):
        return False
    params = node.inputs[1:5]
    return len(params) == 4 and all(p is not None and p.const_value is not None for p in params)


def _candidate(node: ir.Node) -> ir.Node | None:
    """The Conv that ``node`` (a BatchNormalization) can be folded into, if any."""
    if not _statistics_constant(node) or node.inputs[0] is None:
        return None
    conv = node.inputs[0].producer()
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
        return None
    weight = conv.inputs[1]
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    constant = weight is not None and weight.const_value is not None
    if not constant or (bias is not None and bias.const_value is None):
        return None
    output = conv.outputs[0]
    return conv if len(output.uses()) == 1 and not output.is_graph_output() else None


def _fold(graph: ir.Graph, bn: ir.Node, conv: ir.Node) -> None:
    epsilon = bn.attributes.get_float("epsilon", 1e-5)
    weight = conv.inputs[1]
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    assert weight is not None and weight.const_value is not None
    params = list(bn.inputs[1:5])
    label = _module(params[0])
    shape = tuple(weight.const_value.shape.numpy())
    channels = (shape[0],)
    dtype = weight.const_value.dtype

    def new_weight(arrays: list[np.ndarray | None]) -> np.ndarray:
        w = arrays[0]
        assert w is not None
        scale = _scale(arrays, epsilon).reshape(-1, *([1] * (w.ndim - 1)))
        return np.asarray(w * scale)

    def new_bias(arrays: list[np.ndarray | None]) -> np.ndarray:
        b, _, beta, mean, _ = arrays
        assert beta is not None and mean is not None
        shift = -mean if b is None else b - mean
        return np.asarray(shift * _scale(arrays, epsilon) + beta)

    folded_weight = derived_initializer(
        graph, f"{weight.name}.fold({label})", [weight, *params], new_weight, dtype, shape
    )
    bias_name = f"{bias.name}.fold({label})" if bias is not None else f"{label}.bias.fold(conv)"
    folded_bias = derived_initializer(graph, bias_name, [bias, *params], new_bias, dtype, channels)
    conv.replace_input_with(1, folded_weight)
    if len(conv.inputs) > 2:
        conv.replace_input_with(2, folded_bias)
    else:
        conv.resize_inputs(3)
        conv.replace_input_with(2, folded_bias)
    if bn.outputs[0].is_graph_output():  # the model's output keeps its name
        conv.outputs[0].name, bn.outputs[0].name = bn.outputs[0].name, None
    ir.convenience.replace_all_uses_with(bn.outputs[0], conv.outputs[0], replace_graph_outputs=True)
    graph.remove(bn, safe=True)


def fold_batch_norm_into_conv(model: ir.Model) -> int:
    """Fold every inference BatchNormalization that follows a Conv; return how many."""
    graph = model.graph
    folded = 0
    for node in list(graph):
        conv = _candidate(node)
        if conv is None:
            continue
        old = [*conv.inputs[1:3], *node.inputs[1:5]]
        _fold(graph, node, conv)
        for value in old:
            if value is None or value.uses() or value.is_graph_output():
                continue
            if str(value.name) in graph.initializers:
                graph.initializers.pop(str(value.name))
        folded += 1
    return folded
