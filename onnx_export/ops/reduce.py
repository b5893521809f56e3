"""Reductions, scans and order statistics torchlib lacks or gets wrong.

``amax``/``amin`` without ``dim``, ``all``/``any`` on 0-d tensors, ``count_nonzero``,
``cumprod``/``cummax``/``cummin`` (an ONNX ``Scan``), ``median``/``nanmedian``/
``kthvalue``/``mode``, ``searchsorted``/``bucketize`` (counting comparisons),
``unique_consecutive``, and ``mean`` over axes that may be empty (NaN, as torch gives,
where ONNX Runtime's ``ReduceMean`` gives 0). Histograms are in ``histogram``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    cast_to,
    const,
    fx_output_dtypes,
    ints,
    is_float,
    known_dtype,
    known_rank,
    op,
    rank,
    scan,
)
from onnx_export.ops._opset import Opset
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_mean_dim",
    "count_before",
    "aten_count_nonzero",
    "aten_cumprod",
    "aten_median",
    "aten_nanmedian",
    "aten_median_dim",
    "aten_nanmedian_dim",
    "aten_kthvalue",
    "aten_searchsorted",
    "aten_bucketize",
    "aten_amax",
    "aten_amin",
    "aten_all",
    "aten_any",
    "aten_cummax",
    "aten_cummin",
    "aten_mode",
    "aten_unique_consecutive",
]

_INT64 = ir.DataType.INT64


def _axes(dim: int | Sequence[int] | None, x: ir.Value) -> list[int] | None:
    """``dim`` as non-negative axes (``None``: all axes; 0-d tensors have none)."""
    r = rank(x)
    if dim is None or r is None:
        return None if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if r == 0:
        return []
    return sorted({d % r for d in dims}) if dims else None


def _reduce(
    name: str, x: ir.Value, dim: int | Sequence[int] | None, keepdim: bool, source: ir.Value
) -> ir.Value:
    axes = _axes(dim, source)
    if axes == [] and rank(source) == 0:
        return op.Identity(x)
    reducer: Callable[..., ir.Value] = getattr(op, name)
    if axes is None:
        return reducer(x, keepdims=int(keepdim))
    return reducer(x, ints(axes), keepdims=int(keepdim))


def _extremum(name: str) -> Callable[..., Any]:
    def function(self: ir.Value, dim: Sequence[int] = (), keepdim: bool = False) -> ir.Value:
        x = self
        if self.dtype == ir.DataType.BOOL:
            x = op.Cast(self, to=int(ir.DataType.UINT8))
        result = _reduce(name, x, dim, keepdim, self)
        return cast_to(result, self.dtype) if self.dtype == ir.DataType.BOOL else result

    function.__name__ = f"aten_{name.lower()}"
    function.__doc__ = f"{name}(Tensor self, int[1] dim=[], bool keepdim=False): all axes if []."
    return function


def _truth(kind: str) -> Callable[..., Any]:
    def function(
        self: ir.Value, dim: int | Sequence[int] | None = None, keepdim: bool = False
    ) -> ir.Value:
        nonzero = op.Cast(op.Not(op.Equal(self, const(0, self))), to=int(ir.DataType.INT32))
        if self.dtype == ir.DataType.BOOL:
            nonzero = op.Cast(self, to=int(ir.DataType.INT32))
        reduced = _reduce(
            "ReduceMin" if kind == "all" else "ReduceMax", nonzero, dim, keepdim, self
        )
        return cast_to(reduced, ir.DataType.BOOL)

    function.__name__ = f"aten_{kind}"
    function.__doc__ = f"{kind}(Tensor self, int[]? dim=None, bool keepdim=False)."
    return function


@onnx_op("aten::count_nonzero", "aten::count_nonzero.dim_IntList")
def aten_count_nonzero(self: ir.Value, dim: int | Sequence[int] | None = None) -> ir.Value:
    """count_nonzero(Tensor self, int? dim=None) -> Tensor (int64)."""
    if self.dtype == ir.DataType.BOOL:
        nonzero = op.Cast(self, to=int(_INT64))
    else:
        nonzero = op.Cast(op.Not(op.Equal(self, const(0, self))), to=int(_INT64))
    if isinstance(dim, Sequence) and not dim:
        dim = None
    return _reduce("ReduceSum", nonzero, dim, False, self)


# -- scans -------------------------------------------------------------------------------


def _slice_shape(x: ir.Value, axis: int) -> ir.Value:
    return op.Concat(op.Shape(x, start=0, end=axis), op.Shape(x, start=axis + 1), axis=0)


@onnx_op("aten::cumprod")
def aten_cumprod(self: ir.Value, dim: int, dtype: int | None = None) -> ir.Value:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None): an exact Scan of Mul."""
    out_dtypes = fx_output_dtypes()
    target = ir.DataType(dtype) if dtype is not None else (out_dtypes or [self.dtype])[0]
    if target is None:
        target = known_dtype(self)
    x = cast_to(self, target)
    r = known_rank(self)
    if r == 0:
        return op.Identity(x)
    axis = dim % r
    ones = op.Expand(const(1, x), _slice_shape(self, axis))

    def body(sub: Opset, state: ir.Value, item: ir.Value) -> list[ir.Value]:
        product = sub.Mul(state, item)
        return [product, sub.Identity(product)]

    return scan(body, [ones], [x], axis=axis, output_dtypes=[target])[1]


def _cumulative_extremum(kind: str) -> Callable[..., Any]:
    def function(self: ir.Value, dim: int) -> tuple[ir.Value, ir.Value]:
        r = known_rank(self)
        if r == 0:
            return op.Identity(self), op.Constant(value_int=0)
        axis = dim % r
        first = op.Gather(self, op.Constant(value_int=0), axis=axis)
        zeros = op.Expand(op.Constant(value_int=0), _slice_shape(self, axis))
        counter = op.Constant(value_int=0)
        floating = is_float(self)

        def body(
            sub: Opset, best: ir.Value, best_index: ir.Value, step: ir.Value, item: ir.Value
        ) -> list[ir.Value]:
            compare = sub.GreaterOrEqual if kind == "max" else sub.LessOrEqual
            take = compare(item, best)
            if floating:
                take = sub.Or(take, sub.IsNaN(item))
            value = sub.Where(take, item, best)
            index = sub.Where(take, step, best_index)
            next_step = sub.Add(step, sub.Constant(value_int=1))
            return [value, index, next_step, sub.Identity(value), sub.Identity(index)]

        dtype = known_dtype(self)
        outputs = scan(
            body,
            [first, zeros, counter],
            [self],
            axis=axis,
            output_dtypes=[dtype, _INT64],
        )
        return outputs[3], outputs[4]

    function.__name__ = f"aten_cum{kind}"
    function.__doc__ = f"cum{kind}(Tensor self, int dim) -> (Tensor values, Tensor indices)."
    return function


# -- order statistics --------------------------------------------------------------------


def _sorted_along(x: ir.Value, axis: int) -> tuple[ir.Value, ir.Value]:
    """Ascending values and indices along ``axis``; NaN sorts last (as +inf, then NaN)."""
    count = op.Reshape(op.Gather(op.Shape(x), op.Constant(value_int=axis)), ints([1]))
    key = x
    if is_float(x):
        key = op.Where(op.IsNaN(x), const(float("inf"), x), x)
    _, indices = op.TopK(key, count, axis=axis, largest=0, sorted=1)
    return op.GatherElements(x, indices, axis=axis), indices


def _pick(
    values: ir.Value, indices: ir.Value, position: ir.Value, axis: int, keepdim: bool
) -> tuple[ir.Value, ir.Value]:
    value = op.GatherElements(values, position, axis=axis)
    index = op.GatherElements(indices, position, axis=axis)
    if not keepdim:
        value = op.Squeeze(value, ints([axis]))
        index = op.Squeeze(index, ints([axis]))
    return value, index


def _median(
    self: ir.Value, dim: int | None, keepdim: bool, ignore_nan: bool
) -> tuple[ir.Value, ir.Value]:
    x = self
    if dim is None:
        x = op.Reshape(self, ints([-1]))
        dim = 0
    r = rank(x) or 0
    if r == 0:
        return op.Identity(x), op.Constant(value_int=0)
    axis = dim % r
    values, indices = _sorted_along(x, axis)
    if ignore_nan and is_float(x):
        valid = op.Cast(op.Not(op.IsNaN(x)), to=int(_INT64))
        count = op.ReduceSum(valid, ints([axis]), keepdims=1)
    else:
        kept = op.Concat(
            op.Shape(x, start=0, end=axis), ints([1]), op.Shape(x, start=axis + 1), axis=0
        )
        count = op.Expand(op.Gather(op.Shape(x), ints([axis])), kept)
    position = op.Div(op.Sub(count, ints([1])), ints([2]))
    position = op.Max(position, op.Constant(value_int=0))
    value, index = _pick(values, indices, position, axis, keepdim)
    if is_float(x):
        any_nan = op.ReduceMax(
            op.Cast(op.IsNaN(x), to=int(ir.DataType.INT32)), ints([axis]), keepdims=int(keepdim)
        )
        all_nan = op.ReduceMin(
            op.Cast(op.IsNaN(x), to=int(ir.DataType.INT32)), ints([axis]), keepdims=int(keepdim)
        )
        nan_wins = all_nan if ignore_nan else any_nan
        value = op.Where(op.Cast(nan_wins, to=int(ir.DataType.BOOL)), const(float("nan"), x), value)
    return value, index


@onnx_op("aten::median")
def aten_median(self: ir.Value) -> ir.Value:
    """median(Tensor self): the lower median of all elements; NaN if any is NaN."""
    return _median(self, None, False, ignore_nan=False)[0]


@onnx_op("aten::nanmedian")
def aten_nanmedian(self: ir.Value) -> ir.Value:
    """nanmedian(Tensor self): the lower median of the non-NaN elements."""
    return _median(self, None, False, ignore_nan=True)[0]


@onnx_op("aten::median.dim")
def aten_median_dim(self: ir.Value, dim: int, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (values, indices)."""
    return _median(self, dim, keepdim, ignore_nan=False)


@onnx_op("aten::nanmedian.dim")
def aten_nanmedian_dim(
    self: ir.Value, dim: int, keepdim: bool = False
) -> tuple[ir.Value, ir.Value]:
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (values, indices)."""
    return _median(self, dim, keepdim, ignore_nan=True)


@onnx_op("aten::kthvalue")
def aten_kthvalue(
    self: ir.Value, k: int | ir.Value, dim: int = -1, keepdim: bool = False
) -> tuple[ir.Value, ir.Value]:
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (values, indices)."""
    r = rank(self) or 0
    if r == 0:
        return op.Identity(self), op.Constant(value_int=0)
    axis = dim % r
    k_value = op.Reshape(k, ints([1])) if isinstance(k, ir.Value) else ints([int(k)])
    key = self
    if is_float(self):
        key = op.Where(op.IsNaN(self), const(float("inf"), self), self)
    _, indices = op.TopK(key, k_value, axis=axis, largest=0, sorted=1)
    last = op.Sub(k_value, ints([1]))
    index = op.Gather(indices, op.Squeeze(last), axis=axis)
    value = op.GatherElements(self, op.Unsqueeze(index, ints([axis])), axis=axis)
    if keepdim:
        return value, op.Unsqueeze(index, ints([axis]))
    return op.Squeeze(value, ints([axis])), index


# -- searching sorted sequences ----------------------------------------------------------


def count_before(boundaries: ir.Value, values: ir.Value, right: bool, per_row: bool) -> ir.Value:
    """How many boundaries lie before each value (``<``, or ``<=`` when ``right``)."""
    expanded = op.Unsqueeze(values, ints([-1]))
    sequence = op.Unsqueeze(boundaries, ints([-2])) if per_row else boundaries
    before = op.LessOrEqual(sequence, expanded) if right else op.Less(sequence, expanded)
    return op.ReduceSum(op.Cast(before, to=int(_INT64)), ints([-1]), keepdims=0)


def _index_dtype(out_int32: bool) -> ir.DataType:
    return ir.DataType.INT32 if out_int32 else _INT64


@onnx_op("aten::searchsorted.Tensor", "aten::searchsorted.Scalar")
def aten_searchsorted(
    sorted_sequence: ir.Value,
    self: ir.Value | float,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: ir.Value | None = None,
) -> ir.Value:
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, ..., Tensor? sorter)."""
    sequence: Any = sorted_sequence
    if sorter is not None:
        sequence = op.GatherElements(sorted_sequence, sorter, axis=-1)
    values = self if isinstance(self, ir.Value) else op.CastLike(self, sorted_sequence)
    values = op.CastLike(values, sorted_sequence)
    per_row = rank(sorted_sequence) != 1
    result = count_before(sequence, values, right or side == "right", per_row)
    return cast_to(result, _index_dtype(out_int32))


@onnx_op("aten::bucketize.Tensor", "aten::bucketize.Scalar")
def aten_bucketize(
    self: ir.Value | float, boundaries: ir.Value, out_int32: bool = False, right: bool = False
) -> ir.Value:
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32, bool right)."""
    values = op.CastLike(self, boundaries)
    result = count_before(boundaries, values, right, per_row=False)
    return cast_to(result, _index_dtype(out_int32))


aten_amax = onnx_op("aten::amax")(_extremum("ReduceMax"))
aten_amin = onnx_op("aten::amin")(_extremum("ReduceMin"))
aten_all = onnx_op("aten::all", "aten::all.dim", "aten::all.dims")(_truth("all"))
aten_any = onnx_op("aten::any", "aten::any.dim", "aten::any.dims")(_truth("any"))
aten_cummax = onnx_op("aten::cummax")(_cumulative_extremum("max"))
aten_cummin = onnx_op("aten::cummin")(_cumulative_extremum("min"))


# -- histograms --------------------------------------------------------------------------


@onnx_op("aten::mode")
def aten_mode(self: ir.Value, dim: int = -1, keepdim: bool = False) -> tuple[ir.Value, ir.Value]:
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (values, indices).

    The most frequent value (the smallest among ties) and its last position, by counting
    pairwise equalities along ``dim`` (quadratic in its size).
    """
    r = known_rank(self)
    if r == 0:
        return op.Identity(self), op.Constant(value_int=0)
    axis = dim % r
    perm = [*range(axis), *range(axis + 1, r), axis]
    x = op.Transpose(self, perm=perm) if axis != r - 1 else self
    equal = op.Equal(op.Unsqueeze(x, ints([-1])), op.Unsqueeze(x, ints([-2])))
    counts = op.ReduceSum(op.Cast(equal, to=int(_INT64)), ints([-1]), keepdims=0)
    most = op.Equal(counts, op.ReduceMax(counts, ints([-1]), keepdims=1))
    largest = const(float("inf"), x) if is_float(x) else const(int(np.iinfo(np.int64).max), x)
    value = op.ReduceMin(op.Where(most, x, largest), ints([-1]), keepdims=1)
    index = op.ArgMax(op.Cast(op.Equal(x, value), to=int(ir.DataType.INT32)), axis=-1,
                      keepdims=1, select_last_index=1)  # fmt: skip
    if keepdim:
        inverse = [perm.index(i) for i in range(r)]
        return op.Transpose(value, perm=inverse), op.Transpose(index, perm=inverse)
    return op.Squeeze(value, ints([-1])), op.Squeeze(index, ints([-1]))


@onnx_op("aten::unique_consecutive")
def aten_unique_consecutive(
    self: ir.Value,
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """unique_consecutive(Tensor self, ..., int? dim=None) -> (values, inverse, counts).

    Flattened (``dim=None``): an element starts a run when it differs from the one before.
    """
    if dim is not None:
        raise NotImplementedError("unique_consecutive along a dimension")
    flat = op.Reshape(self, ints([-1]))
    size = op.Shape(flat)
    changed = op.Not(
        op.Equal(
            op.Slice(flat, ints([1]), ints([2**62]), ints([0])),
            op.Slice(flat, ints([0]), ints([-1]), ints([0])),
        )
    )
    starts_run = op.Slice(
        op.Concat(op.Constant(value=ir.tensor([True])), changed, axis=0), ints([0]), size, ints([0])
    )
    values = op.Compress(flat, starts_run, axis=0)
    inverse = op.Sub(
        op.CumSum(op.Cast(starts_run, to=int(_INT64)), op.Constant(value_int=0)), ints([1])
    )
    starts = op.Reshape(op.NonZero(starts_run), ints([-1]))
    ends = op.Concat(op.Slice(starts, ints([1]), ints([2**62]), ints([0])), size, axis=0)
    return values, op.Reshape(inverse, op.Shape(self)), op.Sub(ends, starts)


def _may_be_empty(x: ir.Value, axes: list[int] | None) -> bool:
    """Whether one of ``x``'s ``axes`` (None: all) is 0 or known to be symbolic (maybe 0).

    An unknown shape counts as not empty: the rank-known, size-unknown values inside a
    decoder's norms must keep ``ReduceMean``, the form ONNX Runtime's fusions match.
    """
    shape = x.shape
    if shape is None:
        return False
    sizes = [shape[a] for a in (axes if axes is not None else range(len(shape)))]
    return any(not isinstance(size, int) or size == 0 for size in sizes)


@onnx_op("aten::mean.dim", "aten::mean")
def aten_mean_dim(
    self: ir.Value,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    dtype: int | None = None,
) -> ir.Value:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None).

    torch's mean of no elements is NaN (0 / 0); ONNX Runtime's ``ReduceMean`` of an empty
    axis gives 0. Where a reduced axis is known to be symbolic (a dynamic sequence) it is
    the sum over the count, which is NaN for a count of 0; elsewhere ``ReduceMean`` (the
    form fusions match).
    """
    x = op.Cast(self, to=int(dtype)) if dtype is not None and dtype != -1 else self
    if rank(self) == 0:
        return op.Identity(x)
    axes = _axes(dim, self)
    if not _may_be_empty(self, axes):
        if axes is None or not dim:
            return _reduce("ReduceMean", x, dim, keepdim, self)
        # the axes as written (-1 stays -1): ONNX Runtime's RMSNorm fusion matches axes [-1]
        written = [int(d) for d in (dim if isinstance(dim, Sequence) else [dim])]
        return op.ReduceMean(x, ints(written), keepdims=int(keepdim))
    total = _reduce("ReduceSum", x, dim, keepdim, self)
    sizes = op.Shape(x) if axes is None else op.Gather(op.Shape(x), ints(axes), axis=0)
    count = op.CastLike(op.ReduceProd(sizes, keepdims=0), total)
    return op.Div(total, count)
