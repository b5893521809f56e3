"""Pooling torchlib gets wrong or lacks.

Average pooling with ``ceil_mode`` or ``divisor_override`` (exact divisors; otherwise one
``AveragePool`` with its own ``pads`` and ``count_include_pad``), fractional max pooling
(windows placed from the given samples, as ATen does; dynamic sizes too). Adaptive
pooling is in :mod:`onnx_export.ops.adaptive_pool`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    const,
    ints,
    known_rank,
    known_shape,
    op,
    rank,
    static_dims,
    unsupported,
)
from onnx_export.ops._registration import onnx_op

__all__ = [
    "expand_param",
    "aten_fractional_max_pool",
    "aten_avg_pool2d",
    "aten_avg_pool3d",
]


def _pool_geometry(
    sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
) -> list[int]:
    """Extra right padding per spatial dim so that every output window fits (ceil_mode)."""
    extra = []
    for size, k, s, p in zip(sizes, kernel, stride, padding, strict=True):
        span = size + 2 * p - k
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        extra.append(max(0, (out - 1) * s + k - (size + 2 * p)))
    return extra


def expand_param(value: Sequence[int] | int, count: int, default: Sequence[int]) -> list[int]:
    """A pooling parameter as one int per spatial dim (``default`` when empty)."""
    if isinstance(value, int):
        return [value] * count
    if not value:
        return list(default)
    return list(value) * count if len(value) == 1 else list(value)


def _avg_pool(
    self: ir.Value,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int] | int,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    spatial: int,
) -> ir.Value:
    if rank(self) == spatial + 1:  # unbatched (C, *spatial): ONNX pools want a batch axis
        batched = op.Unsqueeze(self, ints([0]))
        pooled = _avg_pool(
            batched, kernel_size, stride, padding, ceil_mode, count_include_pad,
            divisor_override, spatial,
        )  # fmt: skip
        return op.Squeeze(pooled, ints([0]))
    kernel = expand_param(kernel_size, spatial, [])
    strides = expand_param(stride, spatial, kernel)
    pads = expand_param(padding, spatial, [0] * spatial)
    if not ceil_mode and not divisor_override:
        # Every window fits: ONNX's own padding and divisor are ATen's (one node).
        return op.AveragePool(
            self,
            kernel_shape=kernel,
            strides=strides,
            pads=pads + pads,
            count_include_pad=int(bool(count_include_pad)),
        )
    dims = static_dims(self)
    if dims is None:
        return _avg_pool_dynamic(
            self, kernel, strides, pads, ceil_mode, count_include_pad, divisor_override
        )
    lead = len(dims) - spatial
    extra = _pool_geometry(dims[lead:], kernel, strides, pads, ceil_mode)
    if not divisor_override and not any(extra):
        # ceil_mode changes nothing when the windows tile the input (ResNet-D's 2x2 pools
        # of even sizes): one node, as without it.
        return op.AveragePool(
            self,
            kernel_shape=kernel,
            strides=strides,
            pads=pads + pads,
            count_include_pad=int(bool(count_include_pad)),
        )
    zeros = [0] * lead
    padded = op.Pad(
        self, ints(zeros + pads + zeros + [p + e for p, e in zip(pads, extra, strict=True)])
    )
    volume = float(math.prod(kernel))
    sums = op.Mul(op.AveragePool(padded, kernel_shape=kernel, strides=strides), const(volume, self))
    if divisor_override:
        return op.Div(sums, const(float(divisor_override), self))
    counts = np.ones([1] * lead + dims[lead:], dtype=np.float32)
    pad_value = 1.0 if count_include_pad else 0.0
    counts = np.pad(counts, [(0, 0)] * lead + [(p, p) for p in pads], constant_values=pad_value)
    counts = np.pad(counts, [(0, 0)] * lead + [(0, e) for e in extra])
    windows = op.AveragePool(
        op.Constant(value=ir.tensor(counts)), kernel_shape=kernel, strides=strides
    )
    divisor = op.Mul(op.CastLike(windows, self), const(volume, self))
    return op.Div(sums, divisor)


def _extra_dynamic(size: ir.Value, k: int, s: int, p: int, ceil_mode: bool) -> ir.Value:
    """``_pool_geometry`` for one axis whose size (1-D INT64) is known only at run time."""
    span = op.Add(size, ints([2 * p - k]))
    steps = op.Div(op.Add(span, ints([s - 1])), ints([s])) if ceil_mode else op.Div(span, ints([s]))
    if ceil_mode:  # the last window must start inside the input or its left padding
        outside = op.GreaterOrEqual(op.Mul(steps, ints([s])), op.Add(size, ints([p])))
        steps = op.Sub(steps, op.Cast(outside, to=int(ir.DataType.INT64)))
    reach = op.Add(op.Mul(steps, ints([s])), ints([k - 2 * p]))
    return op.Max(op.Sub(reach, size), ints([0]))


def _avg_pool_dynamic(
    self: ir.Value,
    kernel: list[int],
    strides: list[int],
    pads: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> ir.Value:
    """ATen's average pooling (``ceil_mode``, exact divisors) for sizes known at run time."""
    spatial = len(kernel)
    sizes = [op.Shape(self, start=i - spatial, end=i - spatial + 1 or None) for i in range(spatial)]
    extra = [
        _extra_dynamic(size, k, s, p, ceil_mode)
        for size, k, s, p in zip(sizes, kernel, strides, pads, strict=True)
    ]
    zeros = [ints([0, 0])]
    begins = op.Concat(*zeros, ints(pads), axis=0)
    ends = op.Concat(*zeros, op.Add(ints(pads), op.Concat(*extra, axis=0)), axis=0)
    padded = op.Pad(self, op.Concat(begins, ends, axis=0))
    volume = float(math.prod(kernel))
    sums = op.Mul(op.AveragePool(padded, kernel_shape=kernel, strides=strides), const(volume, self))
    if divisor_override:
        return op.Div(sums, const(float(divisor_override), self))
    ones = op.ConstantOfShape(
        op.Concat(ints([1, 1]), *sizes, axis=0), value=ir.tensor([1.0], dtype=ir.DataType.FLOAT)
    )
    pad_value = const(1.0 if count_include_pad else 0.0, ones)
    counts = op.Pad(ones, op.Concat(ints([0, 0, *pads, 0, 0, *pads]), axis=0), pad_value)
    tail = op.Concat(ints([0] * (spatial + 2)), ints([0, 0]), op.Concat(*extra, axis=0), axis=0)
    counts = op.Pad(counts, tail)
    windows = op.AveragePool(counts, kernel_shape=kernel, strides=strides)
    divisor = op.Mul(op.CastLike(windows, self), const(volume, self))
    return op.Div(sums, divisor)


def _avg_pool_function(spatial: int) -> Callable[..., Any]:
    def function(
        self: ir.Value,
        kernel_size: Sequence[int],
        stride: Sequence[int] = (),
        padding: Sequence[int] | int = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> ir.Value:
        return _avg_pool(
            self,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
            spatial,
        )

    function.__name__ = f"aten_avg_pool{spatial}d"
    function.__doc__ = (
        f"avg_pool{spatial}d(Tensor self, int[{spatial}] kernel_size, ...): exact divisors."
    )
    return function


def _fractional_starts(
    samples: ir.Value, axis: int, size: int | ir.Value, kernel: int, out: int
) -> ir.Value:
    """Window starts [N, C, out] along one spatial axis, as ATen draws them from ``samples``.

    ``size`` is the axis' size, or (dynamic) its 1-D INT64 value at run time.
    """
    u = op.Gather(samples, op.Constant(value_int=axis), axis=-1)  # [N, C]
    if isinstance(size, int):
        last = op.CastLike(const(float(size - kernel), samples), samples)
        alpha = const((size - kernel) / (out - 1), samples) if out > 1 else last
    else:  # ATen's alpha, (size - kernel) / (out - 1), in the samples' dtype
        last = op.CastLike(op.Sub(size, ints([kernel])), samples)
        alpha = op.Div(last, op.CastLike(const(float(max(out - 1, 1)), samples), samples))
    if out == 1:
        return op.Cast(op.Unsqueeze(op.Expand(last, op.Shape(u)), ints([-1])), to=7)
    steps = op.CastLike(op.Constant(value=ir.tensor(np.arange(out, dtype=np.float32))), samples)
    u3 = op.Unsqueeze(u, ints([-1]))
    starts = op.Sub(op.Floor(op.Mul(op.Add(steps, u3), alpha)), op.Floor(op.Mul(u3, alpha)))
    starts = op.Where(_mask_last(out), last, starts)
    return op.Cast(starts, to=7)


def _spread(positions: ir.Value, d: int, spatial: int) -> ir.Value:
    """[N, C, out_d, k_d] to [N, C, 1.., out_d, 1.., 1.., k_d, 1..] (2 + 2 * spatial axes)."""
    before_out = list(range(2, 2 + d))
    after_out = list(range(3 + d, 2 + spatial))
    # after those, k_d sits at 2 + spatial; place it at 2 + spatial + d
    expanded = op.Unsqueeze(positions, ints(before_out)) if before_out else positions
    expanded = op.Unsqueeze(expanded, ints(after_out)) if after_out else expanded
    kernel_before = list(range(2 + spatial, 2 + spatial + d))
    kernel_after = list(range(3 + spatial + d, 2 + 2 * spatial))
    expanded = op.Unsqueeze(expanded, ints(kernel_before)) if kernel_before else expanded
    return op.Unsqueeze(expanded, ints(kernel_after)) if kernel_after else expanded


def _mask_last(out: int) -> ir.Value:
    return op.Constant(value=ir.tensor(np.arange(out) == out - 1))


def _fractional_max_pool(
    self: ir.Value,
    kernel_size: Sequence[int],
    output_size: Sequence[int],
    random_samples: ir.Value,
) -> tuple[ir.Value, ir.Value]:
    spatial = len(kernel_size)
    unbatched = known_rank(self) == spatial + 1
    x = op.Unsqueeze(self, ints([0])) if unbatched else self
    sizes = _spatial_sizes(self, spatial)
    samples = op.CastLike(random_samples, x)
    strides = _strides(sizes)
    index: ir.Value | None = None
    for d in range(spatial):
        # ATen's 2-d op draws (W, H) from the samples, the 3-d op (T, H, W).
        sample = 1 - d if spatial == 2 else d
        starts = _fractional_starts(
            samples, sample, sizes[d], int(kernel_size[d]), int(output_size[d])
        )
        offsets = op.Constant(value=ir.tensor(np.arange(int(kernel_size[d]), dtype=np.int64)))
        positions = op.Add(op.Unsqueeze(starts, ints([-1])), offsets)  # [N, C, out_d, k_d]
        stride = strides[d]
        positions = op.Mul(
            positions, op.Constant(value_int=stride) if isinstance(stride, int) else stride
        )
        positions = _spread(positions, d, spatial)
        index = positions if index is None else op.Add(index, positions)
    if index is None:
        raise unsupported("at least one spatial dimension (kernel_size)", "none")
    outs = [int(o) for o in output_size]
    window = int(math.prod(int(k) for k in kernel_size))
    flat_index = op.Reshape(index, op.Concat(op.Shape(index, start=0, end=2), ints([-1]), axis=0))
    planes = op.Reshape(x, op.Concat(op.Shape(x, start=0, end=2), ints([-1]), axis=0))
    gathered = op.GatherElements(planes, flat_index, axis=2)
    shape = op.Concat(op.Shape(x, start=0, end=2), ints([*outs, window]), axis=0)
    gathered = op.Reshape(gathered, shape)
    grid = op.Reshape(flat_index, shape)
    values = op.ReduceMax(gathered, ints([-1]), keepdims=0)
    which = op.ArgMax(gathered, axis=-1, keepdims=1)
    indices = op.Squeeze(op.GatherElements(grid, which, axis=-1), ints([-1]))
    if unbatched:
        return op.Squeeze(values, ints([0])), op.Squeeze(indices, ints([0]))
    return values, indices


def _spatial_sizes(x: ir.Value, spatial: int) -> list[int | ir.Value]:
    """The last ``spatial`` sizes of ``x``: ints where static, 1-D INT64 values where not."""
    shape = known_shape(x)
    r = len(shape)
    return [
        d if isinstance(d, int) else op.Shape(x, start=axis, end=axis + 1)
        for axis, d in zip(range(r - spatial, r), shape[r - spatial :], strict=True)
    ]


def _strides(sizes: list[int | ir.Value]) -> list[int | ir.Value]:
    """Row-major strides of a plane of ``sizes`` (ints while every size after is static)."""
    strides: list[int | ir.Value] = []
    for i in range(len(sizes)):
        after = sizes[i + 1 :]
        if all(isinstance(d, int) for d in after):
            strides.append(int(math.prod(d for d in after if isinstance(d, int))))
            continue
        stride: ir.Value = ints([1])
        for d in after:
            stride = op.Mul(stride, ints([d]) if isinstance(d, int) else d)
        strides.append(stride)
    return strides


@onnx_op("aten::fractional_max_pool2d", "aten::fractional_max_pool3d")
def aten_fractional_max_pool(
    self: ir.Value,
    kernel_size: Sequence[int],
    output_size: Sequence[int],
    random_samples: ir.Value,
) -> tuple[ir.Value, ir.Value]:
    """fractional_max_pool{2,3}d(Tensor self, int[] kernel_size, int[] output_size, ...).

    Windows placed as ATen places them from ``random_samples`` (so the results match).
    """
    return _fractional_max_pool(self, kernel_size, output_size, random_samples)


aten_avg_pool2d = onnx_op("aten::avg_pool2d")(_avg_pool_function(2))
aten_avg_pool3d = onnx_op("aten::avg_pool3d")(_avg_pool_function(3))
