"""Scatter-like ops torchlib lacks or gets wrong.

Scatter and index reductions (``mean``, ``include_self=False``), ``index_add``, ``put``,
``segment_reduce``, transformers' mixture-of-experts ``grouped_mm_fallback``, and
``index_put`` with int32 indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    const,
    ints,
    is_float,
    known_dtype,
    known_rank,
    op,
    rank,
)
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_index_put",
    "aten_scatter_reduce_two",
    "aten_scatter_reduce",
    "aten_scatter_value_reduce",
    "aten_index_reduce",
    "aten_index_add",
    "aten_index_copy",
    "aten_index_fill",
    "aten_put",
    "transformers_grouped_mm_fallback",
    "aten_segment_reduce",
]

_INT64 = ir.DataType.INT64

_ONNX_REDUCTION = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul",
                   "amax": "max", "amin": "min", "mean": "add"}  # fmt: skip


def _identity(reduce: str, like: ir.Value) -> float:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if is_float(like):
        return float("-inf") if reduce == "amax" else float("inf")
    info = np.iinfo(known_dtype(like).numpy())
    return int(info.min if reduce == "amax" else info.max)


def _scatter_reduce(
    self: ir.Value, dim: int, index: ir.Value, src: ir.Value, reduce: str, include_self: bool
) -> ir.Value:
    base: Any = self
    if not include_self:
        fill = op.Expand(const(_identity(reduce, self), self), op.Shape(index))
        base = op.ScatterElements(self, index, fill, axis=dim)
    result = op.ScatterElements(base, index, src, axis=dim, reduction=_ONNX_REDUCTION[reduce])
    if reduce != "mean":
        return result
    ones = op.Expand(const(1, self), op.Shape(index))
    count: Any = op.Expand(const(1, self), op.Shape(self))
    if not include_self:
        count = op.ScatterElements(count, index, op.Mul(ones, const(0, self)), axis=dim)
    count = op.ScatterElements(count, index, ones, axis=dim, reduction="add")
    safe = op.Max(count, const(1, self))
    return op.Div(result, safe)


@onnx_op("aten::scatter_reduce.two")
def aten_scatter_reduce_two(
    self: ir.Value, dim: int, index: ir.Value, src: ir.Value, reduce: str, include_self: bool = True
) -> ir.Value:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, ...)."""
    return _scatter_reduce(self, dim, index, src, reduce, include_self)


@onnx_op("aten::scatter.reduce")
def aten_scatter_reduce(
    self: ir.Value, dim: int, index: ir.Value, src: ir.Value, reduce: str
) -> ir.Value:
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce)."""
    return _scatter_reduce(self, dim, index, src, reduce, True)


@onnx_op("aten::scatter.value_reduce")
def aten_scatter_value_reduce(
    self: ir.Value, dim: int, index: ir.Value, value: float, reduce: str
) -> ir.Value:
    """scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce)."""
    src = op.Expand(const(value, self), op.Shape(index))
    return _scatter_reduce(self, dim, index, src, reduce, True)


def _along(self: ir.Value, dim: int, index: ir.Value, like: ir.Value) -> tuple[int, ir.Value]:
    """``dim`` as a positive axis, and ``index`` spread over ``like``'s shape along it."""
    r = known_rank(self)
    axis = dim % r
    shape = [1] * r
    shape[axis] = -1
    return axis, op.Expand(op.Reshape(index, ints(shape)), op.Shape(like))


@onnx_op("aten::index_reduce")
def aten_index_reduce(
    self: ir.Value,
    dim: int,
    index: ir.Value,
    source: ir.Value,
    reduce: str,
    include_self: bool = True,
) -> ir.Value:
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, ...).

    float16 is computed in float32 (ONNX Runtime has no float16 ``ScatterElements`` with a
    reduction on the CPU) and rounded back once.
    """
    if known_dtype(self) == ir.DataType.FLOAT16:
        wide = [op.Cast(v, to=ir.DataType.FLOAT) for v in (self, source)]
        reduced = aten_index_reduce(wide[0], dim, index, wide[1], reduce, include_self)
        return op.Cast(reduced, to=ir.DataType.FLOAT16)
    r = known_rank(self)
    if r == 0:  # one element: reduce as a 1-element vector
        vector = op.Reshape(self, ints([1]))
        updates = op.Reshape(source, ints([1]))
        reduced = _scatter_reduce(
            vector, 0, op.Reshape(index, ints([1])), updates, reduce, include_self
        )
        return op.Reshape(reduced, ints([]))
    axis, spread = _along(self, dim, index, source)
    return _scatter_reduce(self, axis, spread, source, reduce, include_self)


@onnx_op("aten::index_add")
def aten_index_add(
    self: ir.Value, dim: int, index: ir.Value, source: ir.Value, alpha: float = 1
) -> ir.Value:
    """index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor.

    One ``ScatterElements(reduction="add")`` (a graph network's message sum on
    ``edge_index``): torch.export keeps the op whole, and decomposing it traced the node
    again at every export.
    """
    if known_dtype(self) == ir.DataType.BOOL:  # add is "or": counted in int64, then != 0
        if not alpha:
            return op.Identity(self)
        wide, counts = op.Cast(self, to=_INT64), op.Cast(source, to=_INT64)
        return op.Cast(aten_index_reduce(wide, dim, index, counts, "sum"), to=ir.DataType.BOOL)
    if alpha != 1:
        source = op.Mul(source, const(alpha, source))
    return aten_index_reduce(self, dim, index, source, "sum")


@onnx_op("aten::index_copy")
def aten_index_copy(self: ir.Value, dim: int, index: ir.Value, source: ir.Value) -> ir.Value:
    """index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor.

    One ``ScatterElements`` (a static KV cache written at its positions with
    ``index_copy_``, functionalized by torch.export into this op).
    """
    if known_rank(self) == 0:
        return op.Reshape(source, ints([]))
    axis, spread = _along(self, dim, index, source)
    return op.ScatterElements(self, spread, source, axis=axis)


@onnx_op("aten::index_fill.int_Scalar", "aten::index_fill.int_Tensor")
def aten_index_fill(self: ir.Value, dim: int, index: ir.Value, value: Any) -> ir.Value:
    """index_fill.int_Scalar / .int_Tensor(Tensor self, int dim, Tensor index, value).

    The positions ``index`` along ``dim`` set to ``value`` (a number or a 0-d tensor).
    """
    r = known_rank(self)
    if r == 0:
        return op.Expand(op.CastLike(value, self), op.Shape(self))
    axis = dim % r
    flat = op.Reshape(index, ints([-1]))
    picked = op.Concat(
        op.Shape(self, start=0, end=axis),
        op.Shape(flat),
        op.Shape(self, start=axis + 1),
        axis=0,
    )
    fill = op.Expand(op.CastLike(value, self), picked)
    _, spread = _along(self, axis, flat, fill)
    return op.ScatterElements(self, spread, fill, axis=axis)


@onnx_op("aten::put")
def aten_put(
    self: ir.Value, index: ir.Value, source: ir.Value, accumulate: bool = False
) -> ir.Value:
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor."""
    flat = op.Reshape(self, ints([-1]))
    positions = op.Reshape(index, ints([-1]))
    count = op.Shape(flat)
    positions = op.Where(op.Less(positions, ints([0])), op.Add(positions, count), positions)
    updates = op.Reshape(source, ints([-1]))
    reduction = "add" if accumulate else "none"
    scattered = op.ScatterElements(flat, positions, updates, axis=0, reduction=reduction)
    return op.Reshape(scattered, op.Shape(self))


@onnx_op("transformers::grouped_mm_fallback")
def transformers_grouped_mm_fallback(input: ir.Value, weight: ir.Value, offs: ir.Value) -> ir.Value:
    """transformers::grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs).

    Mixture-of-experts matmul: rows of ``input`` (sorted by expert) up to ``offs[e]``
    (cumulative counts) go through ``weight[e]``; rows past the last offset are zeros.
    """
    rows = op.Shape(input, start=0, end=1)
    positions = op.Range(
        op.Constant(value_int=0), op.Squeeze(rows, ints([0])), op.Constant(value_int=1)
    )
    ends = op.Cast(offs, to=int(_INT64))
    expert = op.ReduceSum(
        op.Cast(op.LessOrEqual(ends, op.Unsqueeze(positions, ints([1]))), to=int(_INT64)),
        ints([1]),
        keepdims=0,
    )
    experts = op.Shape(weight, start=0, end=1)
    valid = op.Less(expert, experts)
    chosen = op.Gather(weight, op.Min(expert, op.Sub(experts, ints([1]))), axis=0)
    products = op.Squeeze(op.MatMul(op.Unsqueeze(input, ints([1])), chosen), ints([1]))
    return op.Where(op.Unsqueeze(valid, ints([1])), products, const(0.0, products))


_SEGMENT_REDUCTION = {"sum": "add", "mean": "add", "prod": "mul", "max": "max", "min": "min"}

_SEGMENT_IDENTITY = {
    "sum": 0.0,
    "mean": 0.0,
    "prod": 1.0,
    "max": float("-inf"),
    "min": float("inf"),
}


@onnx_op("aten::segment_reduce")
def aten_segment_reduce(
    data: ir.Value,
    reduce: str,
    lengths: Any = None,
    indices: Any = None,
    offsets: Any = None,
    axis: int = 0,
    unsafe: bool = False,
    initial: float | None = None,
) -> ir.Value:
    """segment_reduce(Tensor data, str reduce, *, Tensor? lengths, ..., Tensor? offsets, ...).

    Consecutive segments along ``axis`` 0 (1-D lengths or offsets), reduced with a
    scatter; ``initial`` takes part in every segment, and is what an empty one holds.
    """
    if axis != 0 or indices is not None:
        raise NotImplementedError("segment_reduce along axis 0 with lengths or offsets")
    if lengths is not None:
        sizes = op.Cast(lengths, to=int(_INT64))
        ends = op.CumSum(sizes, op.Constant(value_int=0))
    else:
        bounds = op.Cast(offsets, to=int(_INT64))
        ends = op.Slice(bounds, ints([1]), ints([2**62]), ints([0]))
        sizes = op.Sub(ends, op.Slice(bounds, ints([0]), ints([-1]), ints([0])))
    rows = op.Shape(data, start=0, end=1)
    positions = op.Range(
        op.Constant(value_int=0), op.Squeeze(rows, ints([0])), op.Constant(value_int=1)
    )
    segment = op.ReduceSum(
        op.Cast(op.LessOrEqual(ends, op.Unsqueeze(positions, ints([1]))), to=int(_INT64)),
        ints([1]),
        keepdims=0,
    )
    r = rank(data) or 1
    index = op.Expand(op.Reshape(segment, ints([-1] + [1] * (r - 1))), op.Shape(data))
    start = _SEGMENT_IDENTITY[reduce] if initial is None else float(initial)
    out_shape = op.Concat(op.Shape(sizes), op.Shape(data, start=1), axis=0)
    base = op.Expand(const(start, data), out_shape)
    result = op.ScatterElements(base, index, data, axis=0, reduction=_SEGMENT_REDUCTION[reduce])
    if reduce != "mean":
        return result
    count = op.CastLike(op.Reshape(sizes, ints([-1] + [1] * (r - 1))), data)
    averaged = op.Div(result, count)
    if initial is None:
        return averaged
    return op.Where(op.Equal(count, const(0.0, data)), const(float(initial), data), averaged)


_NARROW_INDICES = {ir.DataType.INT32, ir.DataType.INT16, ir.DataType.INT8}


@onnx_op("aten::index_put", "aten::_unsafe_index_put")
def aten_index_put(
    self: ir.Value,
    indices: Sequence[ir.Value | None],
    values: ir.Value,
    accumulate: bool = False,
) -> ir.Value:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False).

    torchlib's, with integer indices narrower than int64 cast to int64 first: ONNX's
    ``ScatterND`` takes int64 indices only, and torch's decomposition of ``istft``
    (overlap-add of the frames) indexes with int32.
    """
    from onnxscript.function_libs.torch_lib.ops.core import aten_index_put as torchlib

    wide = [
        op.Cast(index, to=int(ir.DataType.INT64))
        if index is not None and index.dtype in _NARROW_INDICES
        else index
        for index in indices
    ]
    result: ir.Value = torchlib(self, wide, values, accumulate)
    return result
