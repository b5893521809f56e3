"""Complex constants: copies of complex constant tensors, complex fills, complex equality.

Complex tensors travel as their real view (trailing axis of 2), and a complex Python
scalar arrives here already as its real view ``[re, im]`` (see ``translation/_operands.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import ints, op, output_dtype
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_copy_complex",
    "aten_eq_complex",
    "aten_full_complex",
    "aten_full_like_complex",
    "aten_ne_complex",
]


@onnx_op(
    "aten::lift_fresh_copy",
    "aten::clone",
    "aten::detach",
    "aten::alias",
    "aten::contiguous",
    complex=True,
)
def aten_copy_complex(self: ir.Value, memory_format: str | None = None) -> ir.Value:
    """lift_fresh_copy/clone/detach/alias/contiguous of a complex tensor: the same values."""
    return op.Identity(self)


def _size(size: Sequence[Any]) -> ir.Value:
    if all(isinstance(s, int) for s in size):
        return ints([int(s) for s in size])
    parts = [op.Reshape(s, ints([-1])) if isinstance(s, ir.Value) else ints([s]) for s in size]
    return op.Concat(*parts, axis=0)


def _real_dtype() -> ir.DataType:
    dtype = output_dtype(0, ir.DataType.FLOAT)
    return dtype if dtype != ir.DataType.COMPLEX128 else ir.DataType.DOUBLE


@onnx_op("aten::full", complex=True)
def aten_full_complex(
    size: Sequence[Any],
    fill_value: ir.Value,
    dtype: int | None = None,
    layout: str | None = None,
    device: str | None = None,
    pin_memory: bool | None = None,
) -> ir.Value:
    """full(SymInt[] size, Scalar fill_value, ...) with a complex fill: its real view."""
    fill = op.Cast(fill_value, to=int(_real_dtype()))
    return op.Expand(fill, op.Concat(_size(size), ints([2]), axis=0))


@onnx_op("aten::full_like", complex=True)
def aten_full_like_complex(
    self: ir.Value,
    fill_value: ir.Value,
    dtype: int | None = None,
    layout: str | None = None,
    device: str | None = None,
    pin_memory: bool | None = None,
    memory_format: str | None = None,
) -> ir.Value:
    """full_like(Tensor self, Scalar fill_value, ...): the real view of ``self``'s shape."""
    fill = op.Cast(fill_value, to=int(_real_dtype()))
    shape = op.Shape(self)
    if self.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE) and output_dtype(0) != self.dtype:
        shape = op.Concat(shape, ints([2]), axis=0)  # a real self, a complex fill
    return op.Expand(fill, shape)


def _equal(self: ir.Value, other: ir.Value) -> ir.Value:
    same = op.Cast(op.Equal(self, op.CastLike(other, self)), to=int(ir.DataType.INT32))
    return op.Cast(op.ReduceMin(same, ints([-1]), keepdims=0), to=int(ir.DataType.BOOL))


@onnx_op("aten::eq.Tensor", "aten::eq.Scalar", complex=True)
def aten_eq_complex(self: ir.Value, other: ir.Value) -> ir.Value:
    """Eq of complex values: both parts equal."""
    return _equal(self, other)


@onnx_op("aten::ne.Tensor", "aten::ne.Scalar", complex=True)
def aten_ne_complex(self: ir.Value, other: ir.Value) -> ir.Value:
    """Ne of complex values: either part differs."""
    return op.Not(_equal(self, other))
