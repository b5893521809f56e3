"""Recurrent layers as ONNX ``LSTM``/``GRU``/``RNN`` nodes, one per layer, any length.

The capture stage routes ``nn.LSTM``/``nn.GRU``/``nn.RNN`` to the custom ops
``onnx_export::lstm``/``gru``/``rnn`` (``capture/patches/_rnn.py``), so that the time axis stays
symbolic; these functions translate them. torch keeps each layer's weights per direction
as ``w_ih`` (gates x input), ``w_hh`` (gates x hidden), ``b_ih``, ``b_hh``; ONNX wants them
stacked by direction, with the gates in its own order: torch's LSTM gates are
input, forget, cell, output (ONNX: input, output, forget, cell); GRU's are reset, update,
new (ONNX: update, reset, hidden, with ``linear_before_reset=1`` as torch computes).
The reordering is on initializers, which the optimizer folds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import onnx_ir as ir
from onnxscript import opset18

from onnx_export.ops._common import ints, op
from onnx_export.ops._registration import onnx_op

__all__ = ["onnx_export_lstm", "onnx_export_gru", "onnx_export_rnn"]

#: ONNX ops the typed façade (``_opset.py``) does not list: LSTM, GRU, RNN, Split.
_rnn_ops: Any = cast(Any, opset18)

_LSTM_ORDER = (0, 3, 1, 2)  # torch i, f, g, o -> ONNX i, o, f, c
_GRU_ORDER = (1, 0, 2)  # torch r, z, n -> ONNX z, r, h
_RNN_ORDER = (0,)


def _gates(weight: ir.Value, order: Sequence[int]) -> ir.Value:
    """``weight`` with its gate blocks (along axis 0) in ONNX's order."""
    if len(order) == 1:
        return weight
    parts = _rnn_ops.Split(weight, axis=0, num_outputs=len(order))
    return op.Concat(*[parts[i] for i in order], axis=0)


def _by_direction(values: Sequence[ir.Value]) -> ir.Value:
    zero = ints([0])
    return op.Concat(*[op.Unsqueeze(v, zero) for v in values], axis=0)


def _layer_weights(
    weights: Sequence[ir.Value], layer: int, directions: int, bias: bool, order: Sequence[int]
) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """ONNX's ``W``, ``R`` and ``B`` of one layer, from torch's flat weights."""
    per = 4 if bias else 2
    groups = [
        weights[(layer * directions + d) * per : (layer * directions + d + 1) * per]
        for d in range(directions)
    ]
    if all(w.const_value is not None for group in groups for w in group):
        return _constant_weights(groups, bias, order)
    w = [_gates(group[0], order) for group in groups]
    r = [_gates(group[1], order) for group in groups]
    if not bias:
        return _by_direction(w), _by_direction(r), None
    b = [op.Concat(_gates(g[2], order), _gates(g[3], order), axis=0) for g in groups]
    return _by_direction(w), _by_direction(r), _by_direction(b)


def _reordered(value: ir.Value, order: Sequence[int]) -> np.ndarray[Any, Any]:
    assert value.const_value is not None
    array = value.const_value.numpy()
    return np.concatenate([np.split(array, len(order), axis=0)[i] for i in order], axis=0)


def _constant_weights(
    groups: Sequence[Sequence[ir.Value]], bias: bool, order: Sequence[int]
) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """The same, computed now from the initializers: three initializers, no nodes."""
    name = groups[0][0].name or "weight"

    def stacked(arrays: list[np.ndarray[Any, Any]], suffix: str) -> ir.Value:
        tensor = ir.tensor(np.stack(arrays, axis=0), name=f"{name}_{suffix}")
        return op.Constant(value=tensor)

    w = stacked([_reordered(g[0], order) for g in groups], "onnx_W")
    r = stacked([_reordered(g[1], order) for g in groups], "onnx_R")
    if not bias:
        return w, r, None
    b = [np.concatenate([_reordered(g[2], order), _reordered(g[3], order)]) for g in groups]
    return w, r, stacked(b, "onnx_B")


def _state(h0: ir.Value, layer: int, directions: int, layers: int) -> ir.Value:
    if layers == 1:
        return h0
    start = layer * directions
    return op.Slice(h0, ints([start]), ints([start + directions]), ints([0]))


def _layers(
    kind: str,
    input: ir.Value,
    states: Sequence[ir.Value],
    weights: Sequence[ir.Value],
    bias: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
    attributes: dict[str, Any],
    order: Sequence[int],
) -> list[ir.Value]:
    """Run ``num_layers`` ONNX ``kind`` nodes; the output and the stacked final states."""
    directions = 2 if bidirectional else 1
    x = op.Transpose(input, perm=[1, 0, 2]) if batch_first else input
    finals: list[list[ir.Value]] = [[] for _ in states]
    attributes = {"direction": "bidirectional" if bidirectional else "forward", **attributes}
    for layer in range(num_layers):
        w, r, b = _layer_weights(weights, layer, directions, bias, order)
        initial = [_state(s, layer, directions, num_layers) for s in states]
        outputs = getattr(_rnn_ops, kind)(x, w, r, b, None, *initial, **attributes)
        y, *last = outputs
        for collected, value in zip(finals, last, strict=False):
            collected.append(value)
        # (time, directions, batch, hidden) -> (time, batch, directions * hidden)
        x = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), ints([0, 0, -1]))
    out = op.Transpose(x, perm=[1, 0, 2]) if batch_first else x
    stacked = [v[0] if len(v) == 1 else op.Concat(*v, axis=0) for v in finals]
    return [out, *stacked]


def _hidden(state: ir.Value) -> int:
    if state.shape is None or not isinstance(state.shape[-1], int):
        raise ValueError("the hidden size of a recurrent layer must be known")
    return int(state.shape[-1])


@onnx_op("onnx_export::lstm")
def onnx_export_lstm(
    input: ir.Value,
    h0: ir.Value,
    c0: ir.Value,
    weights: Sequence[ir.Value],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[ir.Value, ...]:
    """``nn.LSTM`` (eval mode): ``num_layers`` ONNX ``LSTM`` nodes; output, h_n, c_n."""
    attributes = {"hidden_size": _hidden(h0)}
    out = _layers(
        "LSTM", input, [h0, c0], weights, has_biases, num_layers, bidirectional, batch_first,
        attributes, _LSTM_ORDER,
    )  # fmt: skip
    return tuple(out)


@onnx_op("onnx_export::gru")
def onnx_export_gru(
    input: ir.Value,
    h0: ir.Value,
    weights: Sequence[ir.Value],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[ir.Value, ...]:
    """``nn.GRU`` (eval mode): ``num_layers`` ONNX ``GRU`` nodes; output and h_n."""
    attributes = {"hidden_size": _hidden(h0), "linear_before_reset": 1}
    out = _layers(
        "GRU", input, [h0], weights, has_biases, num_layers, bidirectional, batch_first,
        attributes, _GRU_ORDER,
    )  # fmt: skip
    return tuple(out)


@onnx_op("onnx_export::rnn")
def onnx_export_rnn(
    input: ir.Value,
    h0: ir.Value,
    weights: Sequence[ir.Value],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
    relu: bool,
) -> tuple[ir.Value, ...]:
    """``nn.RNN`` (eval mode, tanh or relu): ``num_layers`` ONNX ``RNN`` nodes; output, h_n."""
    activation = "Relu" if relu else "Tanh"
    attributes = {
        "hidden_size": _hidden(h0),
        "activations": [activation] * (2 if bidirectional else 1),
    }
    out = _layers(
        "RNN", input, [h0], weights, has_biases, num_layers, bidirectional, batch_first,
        attributes, _RNN_ORDER,
    )  # fmt: skip
    return tuple(out)
