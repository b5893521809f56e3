"""Complex-valued variants torchlib lacks.

Complex tensors travel as their real view: a float tensor with a trailing dimension of 2
(real, imaginary). A real tensor operand of complex arithmetic (``mag * phase_z``,
``cos(p) + 1j * sin(p)``) has no such axis: it is made complex first (imaginary part 0,
as torch promotes it), so both operands broadcast on the same axes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnx_export.ops._common import (
    const,
    fx_input,
    int64_1d,
    ints,
    known_rank,
    op,
    rank,
)
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_rsub_complex",
    "aten_constant_pad_nd_complex",
    "aten_conj_physical_complex",
    "aten_unsqueeze_complex",
    "aten_silu_complex",
    "aten_add_complex",
    "aten_sub_complex",
    "aten_mul_complex",
    "aten_div_complex",
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


def _complex_operand(x: Any, index: int, like: ir.Value) -> Any:
    """Argument ``index`` of the node as a complex real view: a real operand gets ``+0j``.

    torch promotes a real tensor or number to complex before complex arithmetic, so
    ``inf * 0j`` terms give what torch's give. An operand that already is a real view (a
    complex tensor, or a real one the dispatcher converted: it did so for every operand
    of a node whose only complex input is a Python scalar) has one axis more than torch's
    value, and is returned as it is.
    """
    val = fx_input(index)
    if not (_is_complex_input(0) or _is_complex_input(1)):
        return x  # the dispatcher's case: a complex Python scalar, every tensor converted
    if isinstance(val, torch.Tensor):
        if val.is_complex():
            return x
        r = val.dim()
    elif isinstance(val, (int, float)) and not isinstance(val, bool):
        r = 0
    else:
        return x
    if not isinstance(x, ir.Value):
        x = op.Constant(value=ir.tensor(float(x), dtype=like.dtype or ir.DataType.FLOAT))
    if rank(x) == r + 1:
        return x
    pads = ints([0] * (r + 1) + [0] * r + [1])  # one 0 after each value on the new axis
    return op.Pad(op.CastLike(op.Unsqueeze(x, ints([-1])), like), pads)


def _mixed(
    torchlib_name: str,
) -> Callable[..., ir.Value]:
    """The complex ``torchlib_name`` of torchlib, real operands made complex first."""

    def call(self: Any, other: Any, *rest: float) -> ir.Value:
        from onnxscript.function_libs.torch_lib.ops import core

        complex_one = self if _is_complex_input(0) or not _is_complex_input(1) else other
        a = _complex_operand(self, 0, complex_one)
        b = _complex_operand(other, 1, complex_one)
        result: ir.Value = getattr(core, torchlib_name)(a, b, *rest)
        return result

    return call


def _is_complex_input(index: int) -> bool:
    val = fx_input(index)
    return isinstance(val, torch.Tensor) and val.is_complex()


@onnx_op("aten::add.Tensor", complex=True)
def aten_add_complex(self: ir.Value, other: Any, alpha: float = 1.0) -> ir.Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1), a complex operand."""
    return _mixed("aten_add_complex")(self, other, alpha)


@onnx_op("aten::sub.Tensor", complex=True)
def aten_sub_complex(self: ir.Value, other: Any, alpha: float = 1.0) -> ir.Value:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1), a complex operand."""
    return _mixed("aten_sub_complex")(self, other, alpha)


@onnx_op("aten::rsub.Tensor", "aten::rsub.Scalar", complex=True)
def aten_rsub_complex(self: Any, other: Any, alpha: float = 1.0) -> ir.Value:
    """rsub(Tensor self, Tensor|Scalar other, *, Scalar alpha=1): other - alpha * self, complex.

    On real views a difference (and a real ``alpha``'s product) is taken per component.
    """
    like = self if _is_complex_input(0) else other
    a = _complex_operand(self, 0, like)
    b = _complex_operand(other, 1, like)
    if alpha != 1:
        a = op.Mul(a, op.CastLike(alpha, a))
    return op.Sub(b, a)


@onnx_op("aten::mul.Tensor", complex=True)
def aten_mul_complex(self: Any, other: Any) -> ir.Value:
    """mul.Tensor(Tensor self, Tensor other), a complex operand."""
    return _mixed("aten_mul_complex")(self, other)


@onnx_op("aten::div.Tensor", complex=True)
def aten_div_complex(self: Any, other: Any) -> ir.Value:
    """div.Tensor(Tensor self, Tensor other), a complex operand."""
    return _mixed("aten_div_complex")(self, other)
