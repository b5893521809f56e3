"""Initializers that onnxscript's optimizer folds out of the model's weights keep their mark.

Our own folds (:mod:`onnx_export.passes.fold_weights`) mark the initializers they make as
the model's parameters or buffers. onnxscript's constant folding makes new initializers too
(an LSTM's gate reordering: ``Slice``/``Concat``/``Unsqueeze`` of its weights, inside our
LSTM function, which it inlines), named after the folded node (``v_Constant_15``) and
unmarked, so ``onnx-export info`` counted an RNN's weights as constants. The optimizer does
not say where a folded tensor came from; the weights it consumed are gone from the graph,
and a new floating-point initializer holding only their values (gates reordered, biases
concatenated) is theirs. Initial states (``zeros``) and shapes are not.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_export._fake import WEIGHT_KEY

__all__ = ["marked_weights", "mark_folded_weights"]

#: Above this many values in the consumed weights, the comparison is not made (the
#: optimizer folds small tensors only; a large model's weights stay whole).
_MAX_VALUES = 1 << 24


def marked_weights(graph: ir.Graph) -> dict[str, ir.Value]:
    """The initializers marked as the model's parameters or buffers, by name."""
    return {
        name: value
        for name, value in graph.initializers.items()
        if value.const_value is not None and value.const_value.metadata_props.get(WEIGHT_KEY)
    }


def _values(value: ir.Value) -> np.ndarray | None:
    tensor = value.const_value
    if tensor is None or value.dtype is None or not value.dtype.is_floating_point():
        return None
    try:
        return np.asarray(tensor.numpy()).ravel()
    except Exception:  # a fake (weight-free) export or a dtype numpy cannot hold
        return None


def mark_folded_weights(graph: ir.Graph, before: dict[str, ir.Value]) -> int:
    """Mark each new floating-point initializer made only of weights that are gone.

    Args:
        graph: The optimized graph.
        before: :func:`marked_weights` of the graph before the optimizer.

    Returns:
        How many initializers were marked.
    """
    gone = [v for name, v in before.items() if name not in graph.initializers]
    arrays = [a for a in map(_values, gone) if a is not None]
    if not arrays or sum(a.size for a in arrays) > _MAX_VALUES:
        return 0
    pool = np.unique(np.concatenate([a.astype(np.float64) for a in arrays]))
    kind = next(
        (v.const_value.metadata_props.get(WEIGHT_KEY) for v in gone if v.const_value),
        "parameter",
    )
    marked = 0
    for value in graph.initializers.values():
        tensor = value.const_value
        if tensor is None or tensor.metadata_props.get(WEIGHT_KEY) or value.name in before:
            continue
        data = _values(value)
        if data is not None and data.size and np.isin(data.astype(np.float64), pool).all():
            tensor.metadata_props[WEIGHT_KEY] = kind or "parameter"
            marked += 1
    return marked
