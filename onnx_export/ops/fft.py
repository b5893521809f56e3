"""Complex-to-real FFTs (``irfft``, ``irfftn``, ``irfft2``, ``hfft``) ONNX Runtime runs.

Torchlib's ``aten__fft_c2r`` ends with an inverse one-sided ``DFT``; with dynamic sizes
ONNX Runtime plans that node's output as the size of its input and fails at run time
("Shape mismatch attempting to re-use buffer"). Here the half spectrum is completed to
the full Hermitian one (``X[n - k] = conj(X[k])``, fitted to ``n // 2 + 1`` bins first:
zero-padded or cut, as torch does) and transformed by an ordinary inverse ``DFT``, whose
output has its input's shape; the real part is the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import const, int64_1d, ints, known_rank, op
from onnx_export.ops._registration import onnx_op

__all__ = ["aten__fft_c2r"]


def _scaled(x: ir.Value, normalization: int, size: ir.Value) -> ir.Value:
    """An inverse ``DFT``'s output (divided by ``size``) scaled to torch's ``normalization``.

    ATen's modes: 0 no scaling, 1 by ``1/sqrt(n)``, 2 by ``1/n`` (what ``DFT`` does).
    """
    n = op.CastLike(size, x)
    if normalization == 0:
        return op.Mul(x, n)
    if normalization == 1:
        return op.Mul(x, op.Sqrt(n))
    return x


def _hermitian(x: ir.Value, axis: int, n: ir.Value) -> ir.Value:
    """The full spectrum of length ``n`` along ``axis`` from its first ``n // 2 + 1`` bins."""
    half = op.Add(op.Div(n, ints([2])), ints([1]))
    have = op.Shape(x, start=axis, end=axis + 1)
    rank = known_rank(x)
    missing = op.Max(op.Sub(half, have), ints([0]))
    ends = op.Concat(ints([0] * axis), missing, ints([0] * (rank - 1 - axis)), axis=0)
    pads = op.Concat(ints([0] * rank), ends, axis=0)
    fitted = op.Slice(op.Pad(x, pads), ints([0]), half, ints([axis]))
    k = op.Range(op.Constant(value_int=0), op.Reshape(n, ints([])), op.Constant(value_int=1))
    lower = op.Less(k, op.Reshape(half, ints([])))
    source = op.Where(lower, k, op.Sub(op.Reshape(n, ints([])), k))
    full = op.Gather(fitted, source, axis=axis)
    sign = op.Where(lower, const(1.0, x), const(-1.0, x))
    sign = op.Reshape(sign, ints([-1] + [1] * (rank - 1 - axis)))
    real = op.Slice(full, ints([0]), ints([1]), ints([-1]))
    imag = op.Mul(op.Slice(full, ints([1]), ints([2]), ints([-1])), sign)
    return op.Concat(real, imag, axis=-1)


@onnx_op("aten::_fft_c2r", complex=True)
def aten__fft_c2r(
    self: ir.Value, dim: Sequence[int], normalization: int, last_dim_size: Any
) -> ir.Value:
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor.

    ``self`` is the complex input's real view (trailing axis of 2); ``last_dim_size`` may
    be symbolic.
    """
    data_rank = known_rank(self) - 1
    axes = [int(d) % data_rank for d in dim]
    batch = 0 in axes  # ONNX's DFT keeps axis 0 for a batch
    x = op.Unsqueeze(self, ints([0])) if batch else self
    axes = [a + int(batch) for a in axes]
    for axis in axes[:-1]:
        x = op.DFT(x, axis=axis, inverse=1, onesided=0)
        x = _scaled(x, normalization, op.Shape(x, start=axis, end=axis + 1))
    n = int64_1d(last_dim_size)
    x = op.DFT(_hermitian(x, axes[-1], n), axis=axes[-1], inverse=1, onesided=0)
    x = _scaled(x, normalization, n)
    if batch:
        x = op.Squeeze(x, ints([0]))
    return op.Squeeze(op.Slice(x, ints([0]), ints([1]), ints([-1])), ints([-1]))
