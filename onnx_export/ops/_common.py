"""What our own ONNX functions share: the opset handle, constants, and the node's FX types.

Our functions are plain Python calling ``onnxscript.opset18`` ops; while the translator
records, each call appends a node to the graph being built (see ``_recorder.py``), so
values carry their dtype and, where the builder could infer it, their shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from onnxscript import evaluator, opset18

__all__ = [
    "op",
    "INT64_MAX",
    "builder",
    "const",
    "ints",
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
]

#: onnxscript types its ops with its own tensor classes; here they record ``ir.Value``\ s.
op: Any = opset18

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


def output_dtype(index: int, default: ir.DataType | None = None) -> ir.DataType | None:
    """The dtype torch gives the current node's ``index``-th output (``default`` if unknown)."""
    dtypes = fx_output_dtypes()
    found = dtypes[index] if index < len(dtypes) else None
    return found if found is not None else default


def empty(dtype: ir.DataType | None) -> Any:
    """An empty 1-D constant of ``dtype`` (FLOAT when unknown), for outputs torch leaves empty."""
    return op.Constant(value=ir.tensor(np.zeros([0], dtype=(dtype or ir.DataType.FLOAT).numpy())))


def fx_input(index: int) -> Any:
    """The FX ``meta["val"]`` of the current node's ``index``-th argument, if known."""
    node = _fx_node()
    if node is None or index >= len(node.args):
        return None
    arg = node.args[index]
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def const(value: float | int | bool, like: ir.Value) -> Any:
    """A scalar constant with ``like``'s dtype."""
    if like.dtype is not None:
        return op.Constant(value=ir.tensor(value, dtype=like.dtype))
    return op.CastLike(op.Constant(value=ir.tensor(value)), like)


def ints(values: Sequence[int]) -> Any:
    """A 1-D INT64 constant."""
    return op.Constant(value_ints=list(values))


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


def cast_to(x: Any, dtype: ir.DataType | None) -> Any:
    """``x`` as ``dtype`` (no node when it already is, or when ``dtype`` is unknown)."""
    if dtype is None or (isinstance(x, ir.Value) and x.dtype == dtype):
        return x
    return op.Cast(x, to=int(dtype))


_SUBGRAPH_COUNTER = iter(range(1 << 62))


def _fresh(prefix: str) -> str:
    return f"{prefix}_{next(_SUBGRAPH_COUNTER)}"


def _tensor_type(value: ir.Value) -> ir.TensorType | None:
    return ir.TensorType(value.dtype) if value.dtype is not None else None


def scan(
    body: Callable[..., Sequence[Any]],
    states: Sequence[ir.Value],
    scanned: Sequence[ir.Value],
    *,
    axis: int,
    output_dtypes: Sequence[ir.DataType],
) -> list[Any]:
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


def loop(body: Callable[..., Sequence[Any]], trips: Any, carried: Sequence[ir.Value]) -> list[Any]:
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

    def traced(sub: Any, i: Any, cond: Any, *values: Any) -> list[Any]:
        return [sub.Identity(cond), *body(sub, i, *values)]

    graph = graph_builder.subgraph(traced, inputs, outputs, name=_fresh("loop_body"))
    keep_going = op.Constant(value=ir.tensor(True))
    result = op.Loop(trips, keep_going, *carried, body=graph)
    return list(result) if isinstance(result, Sequence) else [result]
