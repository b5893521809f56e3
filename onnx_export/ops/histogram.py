"""Histograms: ``histogram`` (bin count or edges) and ``histogramdd``.

Bin indices by arithmetic on the range (or by counting edges), counts by a
``ScatterElements`` sum; ranges, empty inputs and ``density`` as torch defines them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    const,
    ints,
    op,
    static_size,
)
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.math import to_compute, to_result
from onnx_export.ops.reduce import count_before

__all__ = [
    "aten_histc",
    "aten_histogram_bin_ct",
    "aten_histogram_bins_tensor",
    "aten_histogramdd_bin_edges",
    "aten_histogramdd_from_bin_cts",
    "aten_histogramdd_from_bin_tensors",
]


def _histogram_counts(
    x: ir.Value,
    index: ir.Value,
    inside: ir.Value,
    bins: ir.Value,
    weight: ir.Value | None,
    density: bool,
    edges: Any,
) -> tuple[ir.Value, ir.Value]:
    """Counts (or weights) per bin of the elements ``inside`` the range, as torch does."""
    values = (
        op.CastLike(inside, x)
        if weight is None
        else op.Where(inside, op.Reshape(op.CastLike(weight, x), ints([-1])), const(0.0, x))
    )
    zeros = op.ConstantOfShape(bins, value=ir.tensor([0.0], dtype=x.dtype))
    hist = op.ScatterElements(zeros, index, values, axis=0, reduction="add")
    if density:
        widths = op.Sub(op.Slice(edges, ints([1]), ints([2**62]), ints([0])),
                        op.Slice(edges, ints([0]), ints([-1]), ints([0])))  # fmt: skip
        hist = op.Div(hist, op.Mul(op.ReduceSum(hist, keepdims=0), widths))
    return hist, edges


def _bin_range(
    x: ir.Value, given: Sequence[float] | None, empty_high: float, widen: float
) -> tuple[ir.Value, ir.Value]:
    """The range the bins span: ``given``, else the data's (``[0, empty_high]`` if empty).

    Widened by ``widen`` on each side where it is one value (``histogram``: 0.5, ``histc``: 1).
    """
    if given is not None:
        low, high = const(float(given[0]), x), const(float(given[1]), x)
    else:
        empty = op.Equal(op.Size(x), op.Constant(value_int=0))
        low = op.Where(empty, const(0.0, x), op.ReduceMin(x, keepdims=0))
        high = op.Where(empty, const(empty_high, x), op.ReduceMax(x, keepdims=0))
    same = op.Equal(low, high)
    low = op.Where(same, op.Sub(low, const(widen, x)), low)
    high = op.Where(same, op.Add(high, const(widen, x)), high)
    return low, high


@onnx_op("aten::histogram.bin_ct")
def aten_histogram_bin_ct(
    self: ir.Value,
    bins: int = 100,
    range: Sequence[float] | None = None,  # the ATen argument's name
    weight: Any = None,
    density: bool = False,
) -> tuple[ir.Value, ir.Value]:
    """histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, ...)."""
    x = op.Reshape(self, ints([-1]))
    low, high = _bin_range(x, range, empty_high=1.0, widen=0.5)
    steps = op.CastLike(op.Constant(value=ir.tensor(np.arange(bins + 1, dtype=np.float32))), x)
    edges = op.Add(low, op.Mul(op.Div(op.Sub(high, low), const(float(bins), x)), steps))
    scaled = op.Mul(op.Div(op.Sub(x, low), op.Sub(high, low)), const(float(bins), x))
    index = op.Cast(op.Clip(op.Floor(scaled), const(0.0, x), const(float(bins - 1), x)), to=7)
    inside = op.And(op.GreaterOrEqual(x, low), op.LessOrEqual(x, high))
    return _histogram_counts(x, index, inside, ints([bins]), weight, density, edges)


@onnx_op("aten::histc")
def aten_histc(self: ir.Value, bins: int = 100, min: float = 0.0, max: float = 0.0) -> ir.Value:
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor.

    ``min == max`` (the default 0 and 0) takes the data's range, widened by 1 on each
    side where the data is one value (torchlib refused it); elements outside the range are
    not counted, and the last bin holds ``max``. The bin is
    ``floor((x - min) * bins / (max - min))``, torch's order of operations.
    """
    x = op.Reshape(self, ints([-1]))
    low, high = _bin_range(x, None if min == max else (min, max), empty_high=0.0, widen=1.0)
    scaled = op.Div(op.Mul(op.Sub(x, low), const(float(bins), x)), op.Sub(high, low))
    index = op.Cast(op.Clip(op.Floor(scaled), const(0.0, x), const(float(bins - 1), x)), to=7)
    inside = op.And(op.GreaterOrEqual(x, low), op.LessOrEqual(x, high))
    # counted in float32 at least (ONNX Runtime's CPU has no float16 ScatterElements add)
    hist, _ = _histogram_counts(to_compute(x), index, inside, ints([bins]), None, False, None)
    return to_result(hist)


@onnx_op("aten::histogram.bins_tensor")
def aten_histogram_bins_tensor(
    self: ir.Value, bins: ir.Value, weight: Any = None, density: bool = False
) -> tuple[ir.Value, ir.Value]:
    """histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight, bool density)."""
    x = op.Reshape(self, ints([-1]))
    edges = op.CastLike(bins, x)
    count = op.Sub(op.Shape(edges), ints([1]))
    last = op.Squeeze(op.Sub(count, ints([1])), ints([0]))
    index = op.Sub(count_before(edges, x, right=True, per_row=False), op.Constant(value_int=1))
    index = op.Min(op.Max(index, op.Constant(value_int=0)), last)
    low = op.Gather(edges, op.Constant(value_int=0), axis=0)
    high = op.Gather(edges, op.Constant(value_int=-1), axis=0)
    inside = op.And(op.GreaterOrEqual(x, low), op.LessOrEqual(x, high))
    return _histogram_counts(x, index, inside, count, weight, density, edges)


def _column_range(x: ir.Value, d: int, range: Sequence[float] | None) -> tuple[ir.Value, ir.Value]:
    column = op.Gather(x, op.Constant(value_int=d), axis=1)
    if range is not None:
        low, high = const(float(range[2 * d]), x), const(float(range[2 * d + 1]), x)
    else:
        empty = op.Equal(op.Size(column), op.Constant(value_int=0))
        low = op.Where(empty, const(0.0, x), op.ReduceMin(column, keepdims=0))
        high = op.Where(empty, const(1.0, x), op.ReduceMax(column, keepdims=0))
    same = op.Equal(low, high)
    return (
        op.Where(same, op.Sub(low, const(0.5, x)), low),
        op.Where(same, op.Add(high, const(0.5, x)), high),
    )


def _samples(self: ir.Value, count: int) -> ir.Value:
    return op.Reshape(self, ints([-1, count]))


@onnx_op("aten::_histogramdd_bin_edges")
def aten_histogramdd_bin_edges(
    self: ir.Value,
    bins: Sequence[int],
    range: Sequence[float] | None = None,
    weight: Any = None,
    density: bool = False,
) -> list[ir.Value]:
    """_histogramdd_bin_edges(Tensor self, int[] bins, *, float[]? range, ...) -> Tensor[]."""
    x = _samples(self, len(bins))
    edges = []
    for d, count in enumerate(bins):
        low, high = _column_range(x, d, range)
        steps = op.CastLike(op.Constant(value=ir.tensor(np.arange(count + 1, dtype=np.float32))), x)
        edges.append(op.Add(low, op.Mul(op.Div(op.Sub(high, low), const(float(count), x)), steps)))
    return edges


@onnx_op("aten::_histogramdd_from_bin_cts")
def aten_histogramdd_from_bin_cts(
    self: ir.Value,
    bins: Sequence[int],
    range: Sequence[float] | None = None,
    weight: Any = None,
    density: bool = False,
) -> ir.Value:
    """_histogramdd_from_bin_cts(Tensor self, int[] bins, *, float[]? range, ...) -> Tensor."""
    x = _samples(self, len(bins))
    flat: Any = op.Constant(value_int=0)
    inside: Any = None
    volume: Any = None
    for d, count in enumerate(bins):
        low, high = _column_range(x, d, range)
        column = op.Gather(x, op.Constant(value_int=d), axis=1)
        scaled = op.Mul(op.Div(op.Sub(column, low), op.Sub(high, low)), const(float(count), x))
        index = op.Cast(op.Clip(op.Floor(scaled), const(0.0, x), const(float(count - 1), x)), to=7)
        within = op.And(op.GreaterOrEqual(column, low), op.LessOrEqual(column, high))
        inside = within if inside is None else op.And(inside, within)
        flat = op.Add(op.Mul(flat, op.Constant(value_int=count)), index)
        width = op.Div(op.Sub(high, low), const(float(count), x))
        volume = width if volume is None else op.Mul(volume, width)
    values = op.CastLike(inside, x)
    if weight is not None:
        values = op.Where(inside, op.Reshape(op.CastLike(weight, x), ints([-1])), const(0.0, x))
    total = int(np.prod([int(b) for b in bins]))
    hist = op.ScatterElements(
        op.ConstantOfShape(ints([total]), value=ir.tensor([0.0], dtype=x.dtype)),
        flat,
        values,
        axis=0,
        reduction="add",
    )
    if density:
        hist = op.Div(hist, op.Mul(op.ReduceSum(hist, keepdims=0), volume))
    return op.Reshape(hist, ints([int(b) for b in bins]))


@onnx_op("aten::_histogramdd_from_bin_tensors")
def aten_histogramdd_from_bin_tensors(
    self: ir.Value, bins: Sequence[ir.Value], weight: Any = None, density: bool = False
) -> ir.Value:
    """_histogramdd_from_bin_tensors(Tensor self, Tensor[] bins, *, ...) -> Tensor."""
    x = _samples(self, len(bins))
    flat: Any = op.Constant(value_int=0)
    inside: Any = None
    shape = []
    widths = []
    for d, edges_d in enumerate(bins):
        edges = op.CastLike(edges_d, x)
        count = static_size((edges_d.shape or [None])[0], "number of bin edges")
        column = op.Gather(x, op.Constant(value_int=d), axis=1)
        position = op.Sub(count_before(edges, column, right=True, per_row=False), ints([1]))
        index = op.Min(op.Max(position, op.Constant(value_int=0)), op.Constant(value_int=count - 2))
        low = op.Gather(edges, op.Constant(value_int=0), axis=0)
        high = op.Gather(edges, op.Constant(value_int=count - 1), axis=0)
        within = op.And(op.GreaterOrEqual(column, low), op.LessOrEqual(column, high))
        inside = within if inside is None else op.And(inside, within)
        flat = op.Add(op.Mul(flat, op.Constant(value_int=count - 1)), index)
        shape.append(count - 1)
        widths.append(
            op.Sub(
                op.Slice(edges, ints([1]), ints([count]), ints([0])),
                op.Slice(edges, ints([0]), ints([count - 1]), ints([0])),
            )
        )
    values = op.CastLike(inside, x)
    if weight is not None:
        values = op.Where(inside, op.Reshape(op.CastLike(weight, x), ints([-1])), const(0.0, x))
    total = int(np.prod(shape))
    hist = op.ScatterElements(
        op.ConstantOfShape(ints([total]), value=ir.tensor([0.0], dtype=x.dtype)),
        flat,
        values,
        axis=0,
        reduction="add",
    )
    hist = op.Reshape(hist, ints(shape))
    if density:
        volume: Any = None
        for d, width in enumerate(widths):
            axes = [a for a in range(len(shape)) if a != d]
            spread = op.Unsqueeze(width, ints(axes)) if axes else width
            volume = spread if volume is None else op.Mul(volume, spread)
        hist = op.Div(hist, op.Mul(op.ReduceSum(hist, keepdims=0), volume))
    return hist
