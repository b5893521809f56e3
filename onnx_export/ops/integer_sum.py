"""Sums of int64 tensors that wrap around as torch's do.

torch adds int64 numbers modulo 2**64 (two's complement); ONNX Runtime's int64
``ReduceSum`` saturates instead (two sums of ``4e18`` gave ``2**63 - 1``, not the wrapped
negative number), and loses exactness beyond 2**53. BLT's rolling hash of byte groups,
``sum(token * prime ** arange(n))`` with ``prime = 1000000007``, overflows from groups of
three bytes on: its hashed n-gram embeddings then differed from eager by up to 5.

An int64 sum is computed here in four 16-bit pieces: each element is split into
``c0 + c1 * 2**16 + c2 * 2**32 + c3 * 2**48`` (``c0..c2`` in ``[0, 2**16)``, ``c3`` signed),
each piece is summed (exact below 2**37 elements), and the pieces are recombined with
int64 ``Mul``/``Add``, which wrap as torch does. Every other dtype keeps ``ReduceSum``.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnx_export.ops._common import cast_to, const, fx_output_dtypes, ints, op, rank
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_sum_dim_intlist", "aten_sum"]

_PIECE = 2**16
_PIECES = 4
_SMALL_INTEGERS = {
    ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.UINT8,
}  # fmt: skip


def _reduce(x: ir.Value, axes: ir.Value | None, keepdim: bool) -> ir.Value:
    if axes is None:
        return op.ReduceSum(x, keepdims=int(keepdim))
    return op.ReduceSum(x, axes, keepdims=int(keepdim))


def _wrapping_sum(x: ir.Value, axes: ir.Value | None, keepdim: bool) -> ir.Value:
    """The int64 sum of ``x`` modulo 2**64, from exact sums of 16-bit pieces."""
    piece = const(_PIECE, x)
    sums = []
    rest = x
    for _ in range(_PIECES - 1):
        low = op.Mod(rest, piece)  # in [0, 2**16): Mod takes the divisor's sign
        sums.append(_reduce(low, axes, keepdim))
        rest = op.Div(op.Sub(rest, low), piece)  # exact: rest - low is a multiple
    sums.append(_reduce(rest, axes, keepdim))  # the top piece, signed
    total = sums[-1]
    for partial in reversed(sums[:-1]):
        total = op.Add(op.Mul(total, piece), partial)  # wraps modulo 2**64
    return total


def _sum(self: ir.Value, dim: Sequence[int] | None, keepdim: bool, dtype: int | None) -> ir.Value:
    target = next(iter(fx_output_dtypes()), None)
    if target is None:
        target = ir.DataType(dtype) if dtype is not None else self.dtype
        if target in _SMALL_INTEGERS:
            target = ir.DataType.INT64  # torch sums bools and small integers as int64
    x = cast_to(self, target)
    # None or []: every axis; a 0-d tensor takes dim 0 or -1 and has no axis to reduce.
    axes = ints(list(dim)) if dim and rank(x) != 0 else None
    if x.dtype == ir.DataType.INT64:
        return _wrapping_sum(x, axes, keepdim)
    return _reduce(x, axes, keepdim)


@onnx_op("aten::sum.dim_IntList")
def aten_sum_dim_intlist(
    self: ir.Value,
    dim: Sequence[int] | None = None,
    keepdim: bool = False,
    dtype: int | None = None,
) -> ir.Value:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype)."""
    return _sum(self, dim, keepdim, dtype)


@onnx_op("aten::sum")
def aten_sum(self: ir.Value, dtype: int | None = None) -> ir.Value:
    """sum(Tensor self, *, ScalarType? dtype=None): every element."""
    return _sum(self, None, False, dtype)
