"""Adaptive average and max pooling (1-d through 3-d), over static or dynamic sizes.

Output cell ``i`` of an axis of size ``n`` pools ``[floor(i*n/out), ceil((i+1)*n/out))``,
as ATen does. Static sizes give constant window tables; dynamic ones compute the same
windows from the size at run time (``_window_masks``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import ints, known_rank, op, static_dims, unsupported
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_adaptive_avg_pool1d",
    "aten_adaptive_max_pool1d",
    "aten__adaptive_avg_pool2d",
    "aten__adaptive_avg_pool3d",
    "aten_adaptive_max_pool2d",
    "aten_adaptive_max_pool3d",
]


def _windows(size: int, out: int) -> list[tuple[int, int]]:
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def _adaptive_avg(self: ir.Value, output_size: Sequence[int], spatial: int) -> ir.Value:
    """Averages each window with one MatMul per spatial axis; leading dims may be dynamic."""
    if self.shape is None:
        raise unsupported("a known rank", "an input of unknown rank")
    r = len(self.shape)
    outs = _output_sizes(output_size)
    if r == spatial + 2 and all(o == 1 for o in outs):
        return op.GlobalAveragePool(self)
    result: ir.Value = self
    for offset in range(spatial):
        axis = r - spatial + offset
        size, out = self.shape[axis], outs[offset]
        if isinstance(size, int):
            matrix = np.zeros([size, out], dtype=np.float32)
            for i, (start, end) in enumerate(_windows(size, out)):
                matrix[start:end, i] = 1.0 / (end - start)
            weights = op.CastLike(op.Constant(value=ir.tensor(matrix)), self)
        else:  # the same matrix, from the size at run time
            member, width = _window_masks(self, axis, out)
            weights = op.Div(op.CastLike(member, self), op.CastLike(width, self))
        perm = [*range(axis), *range(axis + 1, r), axis]
        moved = op.Transpose(result, perm=perm) if axis != r - 1 else result
        pooled = op.MatMul(moved, weights)
        inverse = [perm.index(i) for i in range(r)]
        result = op.Transpose(pooled, perm=inverse) if axis != r - 1 else pooled
    return result


def _scalar(value: int) -> ir.Value:
    return op.Constant(value_int=value)


def _output_sizes(output_size: Sequence[Any]) -> list[int]:
    if not all(isinstance(o, int) for o in output_size):
        raise unsupported(
            "an output size of integers", f"{list(output_size)}", "give output_size as ints"
        )
    return [int(o) for o in output_size]


def _window_masks(x: ir.Value, axis: int, out: int) -> tuple[ir.Value, ir.Value]:
    """Which of the ``n`` input positions along ``axis`` each of ``out`` windows holds.

    ``n`` is read at run time: window ``i`` is ``[floor(i*n/out), ceil((i+1)*n/out))``,
    as ATen's. Returns the ``[n, out]`` bool membership and the ``[out]`` window widths.
    """
    n = op.Shape(x, start=axis, end=axis + 1)  # [1], INT64
    steps = op.Constant(value=ir.tensor(np.arange(out, dtype=np.int64)))
    starts = op.Div(op.Mul(steps, n), ints([out]))
    ends = op.Div(op.Add(op.Mul(op.Add(steps, ints([1])), n), ints([out - 1])), ints([out]))
    positions = op.Unsqueeze(op.Range(_scalar(0), op.Squeeze(n, ints([0])), _scalar(1)), ints([1]))
    member = op.And(op.GreaterOrEqual(positions, starts), op.Less(positions, ends))
    return member, op.Sub(ends, starts)


def _adaptive_avg_function(spatial: int) -> Callable[..., Any]:
    def function(self: ir.Value, output_size: Sequence[int]) -> ir.Value:
        return _adaptive_avg(self, output_size, spatial)

    function.__name__ = f"aten_adaptive_avg_pool{spatial}d"
    function.__doc__ = f"_adaptive_avg_pool{spatial}d(Tensor self, SymInt[{spatial}] output_size)."
    return function


def _adaptive_max(
    self: ir.Value, output_size: Sequence[int], spatial: int
) -> tuple[ir.Value, ir.Value]:
    """Gathers each window's elements (padded by repeating its first) and reduces them."""
    dims = static_dims(self)
    if dims is None:
        return _adaptive_max_dynamic(self, _output_sizes(output_size), spatial)
    r = len(dims)
    sizes = dims[r - spatial :]
    outs = [int(o) for o in output_size]
    per_dim = [_windows(s, o) for s, o in zip(sizes, outs, strict=True)]
    widest = [max(e - s for s, e in w) for w in per_dim]
    strides = [int(math.prod(sizes[i + 1 :])) for i in range(spatial)]
    table = np.zeros([*outs, int(math.prod(widest))], dtype=np.int64)
    for cell in np.ndindex(*outs):
        ranges = [range(*per_dim[d][cell[d]]) for d in range(spatial)]
        positions = [
            sum(ranges[d][pos[d]] * strides[d] for d in range(spatial))
            for pos in np.ndindex(*[len(x) for x in ranges])
        ]
        table[cell] = positions + [positions[0]] * (table.shape[-1] - len(positions))
    lead = dims[: r - spatial]
    planes = op.Reshape(self, ints([*lead, -1]))
    gathered = op.Gather(planes, op.Constant(value=ir.tensor(table)), axis=len(lead))
    values = op.ReduceMax(gathered, ints([-1]), keepdims=0)
    which = op.ArgMax(gathered, axis=-1, keepdims=1)
    spread = op.Expand(op.Constant(value=ir.tensor(table)), op.Shape(gathered))
    indices = op.Squeeze(op.GatherElements(spread, which, axis=-1), ints([-1]))
    return values, indices


def _window_max(values: ir.Value, flat: ir.Value, axis: int, out: int) -> tuple[ir.Value, ir.Value]:
    """Max over each of ``out`` adaptive windows along ``axis``, and the flat index of it.

    ``flat`` holds, for each element of ``values``, its flat index in the spatial plane.
    Each window's elements are picked by a ``[out, n]`` mask (the rest are ``-inf``), so
    the first maximum wins, as in ATen's scan.
    """
    r = known_rank(values)
    perm = [*range(axis), *range(axis + 1, r), axis]
    moved = op.Unsqueeze(op.Transpose(values, perm=perm), ints([-2]))  # [..., 1, n]
    member, _ = _window_masks(values, axis, out)  # [n, out]
    mask = op.Transpose(member, perm=[1, 0])  # [out, n]
    lowest = op.CastLike(op.Constant(value_float=float("-inf")), values)
    windows = op.Where(mask, moved, lowest)  # [..., out, n]
    which = op.ArgMax(windows, axis=-1, keepdims=1)
    best = op.Squeeze(op.GatherElements(windows, which, axis=-1), ints([-1]))
    candidates = op.Unsqueeze(op.Transpose(flat, perm=perm), ints([-2]))
    spread = op.Expand(candidates, op.Shape(windows))
    index = op.Squeeze(op.GatherElements(spread, which, axis=-1), ints([-1]))
    inverse = [perm.index(i) for i in range(r)]
    return op.Transpose(best, perm=inverse), op.Transpose(index, perm=inverse)


def _adaptive_max_dynamic(
    self: ir.Value, outs: list[int], spatial: int
) -> tuple[ir.Value, ir.Value]:
    """Adaptive max pooling for spatial sizes known at run time, one axis at a time.

    The innermost axis first: the maximum of a box is the maximum over rows of each row's
    maximum, and taking the first maximum at each step gives ATen's (row-major first)
    index.
    """
    r = known_rank(self)
    shape = op.Shape(self)
    flat: ir.Value | None = None
    stride: ir.Value = ints([1])
    for axis in range(r - 1, r - spatial - 1, -1):
        n = op.Shape(self, start=axis, end=axis + 1)
        along = op.Mul(op.Range(_scalar(0), op.Squeeze(n, ints([0])), _scalar(1)), stride)
        positions = op.Reshape(along, ints([-1 if a == axis else 1 for a in range(r)]))
        flat = positions if flat is None else op.Add(flat, positions)
        stride = op.Mul(stride, n)
    assert flat is not None
    values = self
    flat = op.Expand(flat, shape)
    for offset in range(spatial - 1, -1, -1):
        values, flat = _window_max(values, flat, r - spatial + offset, outs[offset])
    return values, flat


def _adaptive_max_function(spatial: int) -> Callable[..., Any]:
    def function(self: ir.Value, output_size: Sequence[int]) -> tuple[ir.Value, ir.Value]:
        return _adaptive_max(self, output_size, spatial)

    function.__name__ = f"aten_adaptive_max_pool{spatial}d"
    function.__doc__ = f"adaptive_max_pool{spatial}d(Tensor self, int[{spatial}] output_size)."
    return function


# The public ops too: a graph that holds them then needs no decomposition (every ResNet).
# 1-d: torch.export keeps them whole (Swin's and other token models' heads pool the tokens).
aten_adaptive_avg_pool1d = onnx_op("aten::adaptive_avg_pool1d")(_adaptive_avg_function(1))
aten_adaptive_max_pool1d = onnx_op("aten::adaptive_max_pool1d")(_adaptive_max_function(1))
aten__adaptive_avg_pool2d = onnx_op("aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d")(
    _adaptive_avg_function(2)
)
aten__adaptive_avg_pool3d = onnx_op("aten::_adaptive_avg_pool3d", "aten::adaptive_avg_pool3d")(
    _adaptive_avg_function(3)
)
aten_adaptive_max_pool2d = onnx_op("aten::adaptive_max_pool2d")(_adaptive_max_function(2))
aten_adaptive_max_pool3d = onnx_op("aten::adaptive_max_pool3d")(_adaptive_max_function(3))
