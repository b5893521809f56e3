"""What our own ONNX functions share: the opset handle, constants, and the node's FX types.

Our functions are plain Python calling ``onnxscript.opset18`` ops; while the translator
records, each call appends a node to the graph being built (see ``translation/_recorder.py``), so
values carry their dtype and, where the builder could infer it, their shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
import onnx_ir as ir
import torch
from onnxscript import evaluator

from onnx_export.errors import UnsupportedOpInputError
from onnx_export.ops._opset import Opset, opset

__all__ = [
    "op",
    "INT64_MAX",
    "builder",
    "const",
    "ints",
    "int64_1d",
    "rank",
    "static_dims",
    "fx_output_dtypes",
    "output_dtype",
    "empty",
    "fx_input",
    "is_float",
    "cast_to",
    "scan",
    "loop",
    "unsupported",
    "known_rank",
    "known_shape",
    "known_dtype",
    "static_shape",
    "static_size",
]

#: The ONNX ops, typed as they behave while recording (see ``_opset.py``).
op: Opset = opset

INT64_MAX = 2**63 - 1

_FLOATS = {
    ir.DataType.FLOAT,
    ir.DataType.DOUBLE,
    ir.DataType.FLOAT16,
    ir.DataType.BFLOAT16,
}


def builder() -> Any:
    """The graph builder recording the current node (the translator's, while it records)."""
    return getattr(evaluator.default(), "builder", None)


def _fx_node() -> torch.fx.Node | None:
    recorder = evaluator.default()
    graph_builder = getattr(recorder, "builder", None)
    return getattr(graph_builder, "current_fx_node", None)


def fx_output_dtypes() -> list[ir.DataType | None]:
    """The ONNX dtypes torch gives the current FX node's outputs (``[]`` if unknown)."""
    from onnx_export._dtypes import value_dtype

    node = _fx_node()
    if node is None:
        return []
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [value_dtype(v) for v in vals]


@overload
def output_dtype(index: int, default: ir.DataType) -> ir.DataType: ...
@overload
def output_dtype(index: int, default: None = None) -> ir.DataType | None: ...
def output_dtype(index: int, default: ir.DataType | None = None) -> ir.DataType | None:
    """The dtype torch gives the current node's ``index``-th output (``default`` if unknown)."""
    dtypes = fx_output_dtypes()
    found = dtypes[index] if index < len(dtypes) else None
    return found if found is not None else default


def empty(dtype: ir.DataType | None) -> ir.Value:
    """An empty 1-D constant of ``dtype`` (FLOAT when unknown), for outputs torch leaves empty."""
    return op.Constant(value=ir.tensor(np.zeros([0], dtype=(dtype or ir.DataType.FLOAT).numpy())))


def fx_input(index: int) -> Any:
    """The FX ``meta["val"]`` of the current node's ``index``-th argument, if known."""
    node = _fx_node()
    if node is None or index >= len(node.args):
        return None
    arg = node.args[index]
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def const(value: float | int | bool, like: ir.Value) -> ir.Value:
    """A scalar constant with ``like``'s dtype."""
    if like.dtype is not None:
        return op.Constant(value=ir.tensor(value, dtype=like.dtype))
    return op.CastLike(op.Constant(value=ir.tensor(value)), like)


def ints(values: Sequence[int]) -> ir.Value:
    """A 1-D INT64 constant."""
    return op.Constant(value_ints=list(values))


def int64_1d(value: Any) -> ir.Value:
    """An int, or a symbolic (SymInt) INT64 scalar, as a 1-D INT64 value of one element."""
    if isinstance(value, ir.Value):
        return op.Reshape(cast_to(value, ir.DataType.INT64), ints([1]))
    return ints([int(value)])


def rank(x: ir.Value) -> int | None:
    """The rank of ``x`` when the graph knows it."""
    return len(x.shape) if x.shape is not None else None


def static_dims(x: ir.Value) -> list[int] | None:
    """The shape of ``x`` when every dimension is a known integer."""
    if x.shape is None:
        return None
    dims = list(x.shape)
    return dims if all(isinstance(d, int) for d in dims) else None  # type: ignore[return-value]


def is_float(x: ir.Value) -> bool:
    """Whether ``x`` holds floating-point numbers."""
    return x.dtype in _FLOATS


def cast_to(x: ir.Value, dtype: ir.DataType | None) -> ir.Value:
    """``x`` as ``dtype`` (no node when it already is, or when ``dtype`` is unknown)."""
    if dtype is None or (isinstance(x, ir.Value) and x.dtype == dtype):
        return x
    return op.Cast(x, to=int(dtype))


# -- limits: what a function needs from its node, as UnsupportedOpInputError -------------


def unsupported(expected: str, got: str, hint: str | None = None) -> UnsupportedOpInputError:
    """The error to raise when the current node lacks what the function ``expected``."""
    from onnx_export.ops._registration import target_name

    node = _fx_node()
    op_name = target_name(node.target) if node is not None else "this op"
    return UnsupportedOpInputError(op_name, expected, got, hint)


def known_rank(x: ir.Value, what: str = "its input") -> int:
    """The rank of ``x``, or :class:`UnsupportedOpInputError` when the graph does not know it."""
    found = rank(x)
    if found is None:
        raise unsupported(f"the rank of {what}", f"{x.name or 'a value'} of unknown rank")
    return found


def known_shape(x: ir.Value, what: str = "its input") -> ir.Shape:
    """The shape of ``x`` (dimensions may be symbolic); raises when even the rank is unknown."""
    if x.shape is None:
        raise unsupported(f"the rank of {what}", f"{x.name or 'a value'} of unknown rank")
    return x.shape


def known_dtype(x: ir.Value, what: str = "its input") -> ir.DataType:
    """The dtype of ``x``; raises when the graph does not know it."""
    if x.dtype is None:
        raise unsupported(f"the dtype of {what}", f"{x.name or 'a value'} of unknown dtype")
    return x.dtype


def static_shape(x: ir.Value, what: str = "its input") -> list[int]:
    """The shape of ``x`` when every dimension is an integer; raises otherwise."""
    dims = static_dims(x)
    if dims is None:
        raise unsupported(f"a static shape of {what}", f"shape {x.shape}")
    return dims


def static_size(value: object, what: str) -> int:
    """``value`` (a dimension) when it is an integer; raises when it is symbolic or unknown."""
    if not isinstance(value, int):
        raise unsupported(
            f"a static {what}", f"{value if value is not None else 'an unknown size'}"
        )
    return value


_SUBGRAPH_COUNTER = iter(range(1 << 62))


def _fresh(prefix: str) -> str:
    return f"{prefix}_{next(_SUBGRAPH_COUNTER)}"


def _tensor_type(value: ir.Value) -> ir.TensorType | None:
    return ir.TensorType(value.dtype) if value.dtype is not None else None


def scan(
    body: Callable[..., Sequence[ir.Value]],
    states: Sequence[ir.Value],
    scanned: Sequence[ir.Value],
    *,
    axis: int,
    output_dtypes: Sequence[ir.DataType],
) -> list[ir.Value]:
    """An ONNX ``Scan`` over ``scanned`` along ``axis``, carrying ``states``.

    ``body(op, *states, *slices)`` records the loop body with the given ``op`` (the
    subgraph's, not the module's) and returns the new states, then one slice per scan
    output (dtypes ``output_dtypes``). Returns the final states, then the stacked
    outputs.
    """
    graph_builder = builder()
    inputs = [ir.Value(name=_fresh("scan_state"), type=_tensor_type(s)) for s in states] + [
        ir.Value(name=_fresh("scan_in"), type=_tensor_type(s)) for s in scanned
    ]
    outputs = [ir.Value(name=_fresh("scan_state_out")) for _ in states] + [
        ir.Value(name=_fresh("scan_out"), type=ir.TensorType(d)) for d in output_dtypes
    ]
    graph = graph_builder.subgraph(body, inputs, outputs, name=_fresh("scan_body"))
    result = op.Scan(
        *states,
        *scanned,
        body=graph,
        num_scan_inputs=len(scanned),
        scan_input_axes=[axis] * len(scanned),
        scan_output_axes=[axis] * len(output_dtypes),
    )
    return list(result) if isinstance(result, Sequence) else [result]


def loop(
    body: Callable[..., Sequence[ir.Value]], trips: ir.Value, carried: Sequence[ir.Value]
) -> list[ir.Value]:
    """An ONNX ``Loop`` of ``trips`` iterations (an INT64 scalar) carrying ``carried``.

    ``body(op, iteration, *carried)`` records one iteration with the given ``op`` (the
    subgraph's) and returns the new carried values; ``iteration`` counts from 0 (INT64).
    Returns the final carried values.
    """
    graph_builder = builder()
    scalar = ir.Shape([])
    iteration = ir.Value(name=_fresh("loop_i"), type=ir.TensorType(ir.DataType.INT64), shape=scalar)
    condition = ir.Value(
        name=_fresh("loop_cond"), type=ir.TensorType(ir.DataType.BOOL), shape=scalar
    )
    inputs = [iteration, condition] + [
        ir.Value(name=_fresh("loop_in"), type=_tensor_type(v)) for v in carried
    ]
    outputs = [ir.Value(name=_fresh("loop_cond_out"))] + [
        ir.Value(name=_fresh("loop_out")) for _ in carried
    ]

    def traced(sub: Opset, i: ir.Value, cond: ir.Value, *values: ir.Value) -> list[ir.Value]:
        return [sub.Identity(cond), *body(sub, i, *values)]

    graph = graph_builder.subgraph(traced, inputs, outputs, name=_fresh("loop_body"))
    keep_going = op.Constant(value=ir.tensor(True))
    result = op.Loop(trips, keep_going, *carried, body=graph)
    return list(result) if isinstance(result, Sequence) else [result]
