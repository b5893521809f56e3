"""Complex-valued variants torchlib lacks.

Complex tensors travel as their real view: a float tensor with a trailing dimension of 2
(real, imaginary).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnx_export.ops._common import (
    const,
    int64_1d,
    ints,
    known_rank,
    op,
)
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_constant_pad_nd_complex",
    "aten_conj_physical_complex",
    "aten_unsqueeze_complex",
    "aten_silu_complex",
]


@onnx_op("aten::constant_pad_nd", complex=True)
def aten_constant_pad_nd_complex(self: ir.Value, pad: Sequence[int], value: float = 0) -> ir.Value:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0), complex self."""
    if value:
        raise NotImplementedError("complex constant_pad_nd with a non-zero fill value")
    r = known_rank(self)
    zero = ints([0])
    begins, ends = [zero] * r, [zero] * r
    for i in range(len(pad) // 2):
        axis = r - 2 - i  # the trailing (real, imaginary) axis is not padded
        begins[axis], ends[axis] = int64_1d(pad[2 * i]), int64_1d(pad[2 * i + 1])
    return op.Pad(self, op.Concat(*begins, *ends, axis=0), const(0.0, self))


@onnx_op("aten::_conj_physical", complex=True)
def aten_conj_physical_complex(self: ir.Value) -> ir.Value:
    """_conj_physical(Tensor self), complex self: negates the imaginary part."""
    return op.Mul(self, op.CastLike(op.Constant(value_floats=[1.0, -1.0]), self))


@onnx_op("aten::unsqueeze", complex=True)
def aten_unsqueeze_complex(self: ir.Value, dim: int) -> ir.Value:
    """unsqueeze(Tensor self, int dim), complex self: negative dims skip the real view."""
    return op.Unsqueeze(self, ints([dim - 1 if dim < 0 else dim]))


def _parts(x: ir.Value) -> tuple[ir.Value, ir.Value]:
    real = op.Gather(x, op.Constant(value_int=0), axis=-1)
    imag = op.Gather(x, op.Constant(value_int=1), axis=-1)
    return real, imag


def _join(real: ir.Value, imag: ir.Value) -> ir.Value:
    return op.Concat(op.Unsqueeze(real, ints([-1])), op.Unsqueeze(imag, ints([-1])), axis=-1)


@onnx_op("aten::silu", complex=True)
def aten_silu_complex(self: ir.Value) -> ir.Value:
    """silu(Tensor self), complex self: x / (1 + exp(-x))."""
    a, b = _parts(self)
    scale = op.Exp(op.Neg(a))
    c = op.Add(const(1.0, a), op.Mul(scale, op.Cos(b)))  # 1 + exp(-x), real part
    d = op.Neg(op.Mul(scale, op.Sin(b)))  # imaginary part
    norm = op.Add(op.Mul(c, c), op.Mul(d, d))
    real = op.Div(op.Add(op.Mul(a, c), op.Mul(b, d)), norm)
    imag = op.Div(op.Sub(op.Mul(b, c), op.Mul(a, d)), norm)
    return _join(real, imag)
