"""How each op that changed after opset 13 is written at an older opset: one entry per op.

Torchlib records at opset 18. An op whose opset-18 form is newer than the target (its
schema's ``since_version`` is above it) is looked up in :data:`LOWERINGS`: the function
rewrites the node in place or into older ops, or raises :class:`NoOlderForm` with the
lowest opset that has what the node does. Ops without an entry have no older form, and
are refused with the opset they appeared in. Type changes (``Add`` on ``int8`` needs 14)
are checked afterwards against the target's schema, for every op alike.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
from onnx_ir import convenience

__all__ = ["LOWERINGS", "NoOlderForm", "Lowering"]

#: Rewrites ``node`` for opset ``target``; raises :class:`NoOlderForm` when it cannot.
Lowering = Callable[[ir.Node, int], None]

LOWERINGS: dict[str, Lowering] = {}

#: Reductions whose ``axes`` moved from an attribute to an input in opset 18.
_REDUCE = (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)  # fmt: skip
#: Ops that only gained types (checked against the target's schema afterwards) or
#: optional/sequence types the exporter does not produce for tensors.
_TYPES_ONLY = (
    "Add", "Sub", "Mul", "Div", "CumSum", "Identity", "GreaterOrEqual", "LessOrEqual",
    "LeakyRelu", "PRelu", "Pow", "Where", "If", "Loop",
)  # fmt: skip


@dataclasses.dataclass
class NoOlderForm(Exception):
    """``node``'s op has no form at the target opset that does what it does.

    Attributes:
        reason: What the node does that the older opset cannot (one clause).
        lowest: The lowest opset that has it.
    """

    reason: str
    lowest: int

    def __str__(self) -> str:
        return f"{self.reason} (opset {self.lowest} has it)"


def lowering(*op_types: str) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the lowering of ``op_types``."""

    def register(function: Lowering) -> Lowering:
        for op_type in op_types:
            LOWERINGS[op_type] = function
        return function

    return register


class _Rewrite:
    """New nodes that take the place of ``node``, with its metadata (source line, scope)."""

    def __init__(self, node: ir.Node) -> None:
        self.node = node
        self.nodes: list[ir.Node] = []

    def op(self, op_type: str, inputs: Sequence[ir.Value | None], **attrs: Any) -> ir.Value:
        new = ir.Node(
            "",
            op_type,
            inputs,
            attributes=convenience.convert_attributes(attrs) if attrs else (),
            name=f"{self.node.name or op_type}_{len(self.nodes)}",
        )
        new.metadata_props.update(self.node.metadata_props)
        new.meta.update(self.node.meta)
        self.nodes.append(new)
        return new.outputs[0]

    def const(self, array: np.ndarray) -> ir.Value:
        return self.op("Constant", [], value=ir.tensor(array))

    def done(self, outputs: Sequence[ir.Value]) -> None:
        graph = self.node.graph
        assert graph is not None, self.node
        for new, old in zip(outputs, self.node.outputs, strict=False):
            new.name, new.type, new.shape = old.name, old.type, old.shape
            old.name = None
        convenience.replace_nodes_and_values(
            graph, self.node, [self.node], self.nodes, list(self.node.outputs), list(outputs)
        )


def _attr(node: ir.Node, name: str, default: object) -> object:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _require_default(node: ir.Node, name: str, default: object, lowest: int) -> None:
    """Drop attribute ``name`` when it holds the older default; refuse otherwise."""
    value = _attr(node, name, default)
    if value != default:
        raise NoOlderForm(f"{name}={value!r}", lowest)
    node.attributes.pop(name, None)


def _numpy_dtype(value: ir.Value, lowest: int) -> np.dtype[np.generic]:
    dtype = value.dtype
    if dtype is None:
        raise NoOlderForm(f"input {value.name!r} has no known element type", lowest)
    try:
        return np.dtype(dtype.numpy())
    except (TypeError, ValueError) as e:
        raise NoOlderForm(f"element type {dtype.name} has no numpy form", lowest) from e


@lowering(*_TYPES_ONLY)
def _types_only(node: ir.Node, target: int) -> None:
    """Nothing to rewrite: the type check that follows refuses types the target lacks."""


@lowering("Scan")
def _scan(node: ir.Node, target: int) -> None:
    """ONNX Runtime runs an opset-11 ``Scan`` only when its body's outputs have shapes.

    A state output has its state input's shape (the body's first inputs).
    """
    body = _attr(node, "body", None)
    if not isinstance(body, ir.Graph):
        return
    states = len(node.inputs) - int(_attr(node, "num_scan_inputs", 0))  # type: ignore[call-overload]  # an int attribute
    for state_in, state_out in zip(body.inputs[:states], body.outputs[:states], strict=True):
        if state_out.shape is None and state_in.shape is not None:
            state_out.shape = state_in.shape
        if state_out.type is None:
            state_out.type = state_in.type
    if any(value.shape is None for value in body.outputs):
        raise NoOlderForm("a body output of unknown shape", 16)


@lowering("Relu")
def _relu(node: ir.Node, target: int) -> None:
    """Relu gained integer types at 14: ``Max(x, 0)`` has them at 13."""
    x = node.inputs[0]
    if x is None or x.dtype is None or x.dtype.is_floating_point():
        return
    rewrite = _Rewrite(node)
    zero = rewrite.const(np.zeros((), _numpy_dtype(x, 14)))
    rewrite.done([rewrite.op("Max", [x, zero])])


def _never_zero(dim: object) -> bool:
    """Whether ``dim`` cannot be 0: a positive size, or a backed dynamic dimension.

    torch.export assumes its backed dynamic dimensions to be at least 2; unbacked ones
    (``u0``, data-dependent sizes) may be 0.
    """
    if isinstance(dim, int):
        return dim > 0
    name = getattr(dim, "value", None)
    return isinstance(name, str) and not re.search(r"\bu\d+\b", name)


@lowering("Reshape")
def _reshape(node: ir.Node, target: int) -> None:
    """Drop ``allowzero=1`` (torch's meaning of a 0 in the shape) where it changes nothing.

    It differs from 13's meaning only when the shape holds a 0, which it cannot when no
    dimension of the result is 0.
    """
    if _attr(node, "allowzero", 0):
        shape = node.outputs[0].shape
        if shape is None or not all(_never_zero(d) for d in shape):
            raise NoOlderForm("a target shape that may hold a 0 (allowzero=1)", 14)
    node.attributes.pop("allowzero", None)


@lowering("BatchNormalization")
def _batch_norm(node: ir.Node, target: int) -> None:
    if target < 14:
        _require_default(node, "training_mode", 0, 14)
        if any(v.uses() or v.is_graph_output() for v in node.outputs[1:]):
            raise NoOlderForm("running statistics as outputs (training mode)", 14)
        node.resize_outputs(1)


@lowering("GRU", "LSTM", "RNN")
def _recurrent(node: ir.Node, target: int) -> None:
    _require_default(node, "layout", 0, 14)


@lowering("Resize")
def _resize(node: ir.Node, target: int) -> None:
    _require_default(node, "antialias", 0, 18)
    _require_default(node, "keep_aspect_ratio_policy", "stretch", 18)
    if "axes" in node.attributes:
        raise NoOlderForm("the axes attribute", 18)


@lowering("LpPool")
def _lp_pool(node: ir.Node, target: int) -> None:
    _require_default(node, "ceil_mode", 0, 18)


@lowering("ScatterElements", "ScatterND")
def _scatter(node: ir.Node, target: int) -> None:
    reduction = _attr(node, "reduction", "none")
    if reduction in ("max", "min") and target < 18:
        raise NoOlderForm(f"reduction={reduction!r}", 18)
    if reduction in ("add", "mul") and target < 16:
        raise NoOlderForm(f"reduction={reduction!r}", 16)
    if reduction == "none" and target < 16:
        node.attributes.pop("reduction", None)


@lowering("Pad")
def _pad(node: ir.Node, target: int) -> None:
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        raise NoOlderForm("padding of chosen axes (the axes input)", 18)
    node.resize_inputs(min(len(node.inputs), 3))


def _constant_ints(value: ir.Value | None) -> list[int] | None:
    tensor = convenience.get_const_tensor(value) if value is not None else None
    return None if tensor is None else [int(a) for a in tensor.numpy().ravel()]


@lowering(*_REDUCE)
def _reduce(node: ir.Node, target: int) -> None:
    """Opset 18 made ``axes`` an input; before, it is an attribute (a constant)."""
    noop = _attr(node, "noop_with_empty_axes", 0)
    node.attributes.pop("noop_with_empty_axes", None)
    axes_value = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_value is None:
        if noop:
            raise NoOlderForm("noop_with_empty_axes=1", 18)
        return
    axes = _constant_ints(axes_value)
    if axes is None:
        raise NoOlderForm("axes computed at run time", 18)
    if not axes and noop:
        raise NoOlderForm("noop_with_empty_axes=1", 18)
    node.resize_inputs(1)
    if axes:
        node.attributes["axes"] = ir.AttrInt64s("axes", axes)


@lowering("Split")
def _split(node: ir.Node, target: int) -> None:
    """Opset 18's ``num_outputs`` becomes split sizes (an uneven split needs the size)."""
    count = _attr(node, "num_outputs", None)
    node.attributes.pop("num_outputs", None)
    if count is None or (len(node.inputs) > 1 and node.inputs[1] is not None):
        return
    x, axis = node.inputs[0], int(_attr(node, "axis", 0))  # type: ignore[call-overload]  # an int attribute
    shape = x.shape if x is not None else None
    size = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
    parts = len(node.outputs)
    if not isinstance(size, int):
        raise NoOlderForm(f"an even split into {parts} parts of a dimension of unknown size", 18)
    if size % parts == 0:
        return
    chunk = math.ceil(size / parts)
    sizes = np.array([chunk] * (parts - 1) + [size - chunk * (parts - 1)], np.int64)
    rewrite = _Rewrite(node)
    sizes_value = rewrite.const(sizes)
    graph = node.graph
    assert graph is not None
    graph.insert_before(node, rewrite.nodes)
    node.resize_inputs(2)
    node.replace_input_with(1, sizes_value)


@lowering("Shape")
def _shape(node: ir.Node, target: int) -> None:
    """``start``/``end`` (15) become a ``Slice`` of the whole shape."""
    start, end = _attr(node, "start", 0), _attr(node, "end", None)
    node.attributes.pop("start", None)
    node.attributes.pop("end", None)
    if start == 0 and end is None:
        return
    rewrite = _Rewrite(node)
    shape = rewrite.op("Shape", [node.inputs[0]])
    ends = np.array([np.iinfo(np.int64).max if end is None else end], np.int64)
    starts = rewrite.const(np.array([start], np.int64))
    rewrite.done([rewrite.op("Slice", [shape, starts, rewrite.const(ends)])])


@lowering("CastLike")
def _cast_like(node: ir.Node, target: int) -> None:
    like = node.inputs[1]
    dtype = like.dtype if like is not None else None
    if dtype is None:
        raise NoOlderForm("casting to the type of a value whose type is not known", 15)
    rewrite = _Rewrite(node)
    rewrite.done([rewrite.op("Cast", [node.inputs[0]], to=dtype)])


@lowering("HardSwish")
def _hard_swish(node: ir.Node, target: int) -> None:
    rewrite = _Rewrite(node)
    x = node.inputs[0]
    gate = rewrite.op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)
    rewrite.done([rewrite.op("Mul", [x, gate])])


@lowering("Mish")
def _mish(node: ir.Node, target: int) -> None:
    rewrite = _Rewrite(node)
    x = node.inputs[0]
    rewrite.done([rewrite.op("Mul", [x, rewrite.op("Tanh", [rewrite.op("Softplus", [x])])])])


@lowering("Trilu")
def _trilu(node: ir.Node, target: int) -> None:
    """Keep the elements whose ``column - row`` is ``>= k`` (upper) or ``<= k`` (lower)."""
    x = node.inputs[0]
    assert x is not None
    dtype = _numpy_dtype(x, 14)
    rewrite = _Rewrite(node)
    shape = rewrite.op("Shape", [x])
    rows = rewrite.op("Gather", [shape, rewrite.const(np.array(-2, np.int64))])
    cols = rewrite.op("Gather", [shape, rewrite.const(np.array(-1, np.int64))])
    zero, one = rewrite.const(np.array(0, np.int64)), rewrite.const(np.array(1, np.int64))
    row = rewrite.op("Unsqueeze", [rewrite.op("Range", [zero, rows, one]), one])
    offset = rewrite.op("Sub", [rewrite.op("Range", [zero, cols, one]), row])
    k = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] is not None else zero
    upper = _attr(node, "upper", 1)
    keep = rewrite.op("GreaterOrEqual" if upper else "LessOrEqual", [offset, k])
    if x.dtype == ir.DataType.BOOL:  # ONNX Runtime's Where-9 has no bool kernel
        rewrite.done([rewrite.op("And", [keep, x])])
        return
    nothing = rewrite.const(np.zeros((), dtype))
    rewrite.done([rewrite.op("Where", [keep, x, nothing])])


@lowering("LayerNormalization")
def _layer_norm(node: ir.Node, target: int) -> None:
    """ONNX's own definition of ``LayerNormalization`` (17) in older ops."""
    if any(v.uses() or v.is_graph_output() for v in node.outputs[1:]):
        raise NoOlderForm("the mean or inverse deviation as outputs", 17)
    x = node.inputs[0]
    assert x is not None
    axis = int(_attr(node, "axis", -1))  # type: ignore[call-overload]  # an int attribute
    if axis >= 0:
        if x.shape is None:
            raise NoOlderForm(f"normalising from axis {axis} of an input of unknown rank", 17)
        axis -= len(x.shape)
    axes = list(range(axis, 0))
    eps = float(_attr(node, "epsilon", 1e-5))  # type: ignore[arg-type]  # a float attribute
    rewrite = _Rewrite(node)
    mean = rewrite.op("ReduceMean", [x], axes=axes, keepdims=1)
    centred = rewrite.op("Sub", [x, mean])
    variance = rewrite.op("ReduceMean", [rewrite.op("Mul", [centred, centred])], axes=axes)
    epsilon = rewrite.const(np.array(eps, _numpy_dtype(x, 17)))
    std = rewrite.op("Sqrt", [rewrite.op("Add", [variance, epsilon])])
    out = rewrite.op("Mul", [rewrite.op("Div", [centred, std]), node.inputs[1]])
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        out = rewrite.op("Add", [out, node.inputs[2]])
    rewrite.done([out])


@lowering("OptionalGetElement", "OptionalHasElement")
def _optional(node: ir.Node, target: int) -> None:
    x = node.inputs[0] if node.inputs else None
    if x is None or not isinstance(x.type, ir.OptionalType):
        raise NoOlderForm("a tensor or sequence (not an optional) as input", 18)
