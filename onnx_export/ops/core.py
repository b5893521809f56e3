"""Core ops torchlib lacks: ``to``, bitwise dunders, ``diff``, ``var``/``std`` with ``correction``.

Like every topic module of ``onnx_export.ops``, each function is plain Python calling
``op.X(...)`` on ``ir.Value`` inputs and is registered by ``@onnx_op`` where it is defined.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from onnx_export.ops._common import INT64_MAX, op
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.tensor import aten_to_copy

__all__ = [
    "aten_to_dtype",
    "aten_to_device",
    "aten_to_dtype_layout",
    "aten_diff",
    "aten_var_correction",
    "aten_std_correction",
    "aten_var_mean_correction",
    "aten_std_mean_correction",
    "aten_var_all",
    "aten_var_unbiased",
    "aten_std_all",
    "aten_std_unbiased",
    "aten_var_mean_all",
    "aten_var_mean_unbiased",
    "aten_std_mean_all",
    "aten_std_mean_unbiased",
    "aten_reshape_as",
    "aten_and_dunder",
    "aten_or_dunder",
    "aten_xor_dunder",
]


def _cast_or_identity(self: ir.Value, dtype: int | None) -> ir.Value:
    if dtype is None or dtype == -1:
        return op.Identity(self)
    return aten_to_copy(self, dtype)  # complex targets as real views


@onnx_op("aten::to.dtype")
def aten_to_dtype(
    self: ir.Value,
    dtype: int,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str | None = None,
) -> ir.Value:
    """to.dtype(Tensor self, ScalarType dtype, ...) -> Tensor."""
    return _cast_or_identity(self, dtype)


@onnx_op("aten::to.device")
def aten_to_device(
    self: ir.Value,
    device: str,
    dtype: int,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str | None = None,
) -> ir.Value:
    """to.device(Tensor self, Device device, ScalarType dtype, ...) -> Tensor."""
    return _cast_or_identity(self, dtype)


@onnx_op("aten::to.dtype_layout")
def aten_to_dtype_layout(
    self: ir.Value,
    dtype: int | None = None,
    layout: str | None = None,
    device: str | None = None,
    pin_memory: bool | None = None,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str | None = None,
) -> ir.Value:
    """to.dtype_layout(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor."""
    return _cast_or_identity(self, dtype)


def _bitwise(logical: str, bitwise: str) -> Callable[[ir.Value, ir.Value], ir.Value]:
    def function(self: ir.Value, other: ir.Value) -> ir.Value:
        name = logical if self.dtype == ir.DataType.BOOL else bitwise
        result: ir.Value = getattr(op, name)(self, other)
        return result

    function.__name__ = f"aten_{logical.lower()}_dunder"
    return function


@onnx_op("aten::diff")
def aten_diff(
    self: ir.Value,
    n: int = 1,
    dim: int = -1,
    prepend: ir.Value | None = None,
    append: ir.Value | None = None,
) -> ir.Value:
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None)."""
    parts = [p for p in (prepend, self, append) if p is not None]
    result = op.Concat(*parts, axis=dim) if len(parts) > 1 else self
    axes = op.Constant(value_ints=[dim])
    for _ in range(n):
        later = op.Slice(
            result, op.Constant(value_ints=[1]), op.Constant(value_ints=[INT64_MAX]), axes
        )
        earlier = op.Slice(result, op.Constant(value_ints=[0]), op.Constant(value_ints=[-1]), axes)
        result = (
            op.Xor(later, earlier) if self.dtype == ir.DataType.BOOL else op.Sub(later, earlier)
        )
    return result


def _variance(
    self: ir.Value, dim: list[int] | None, correction: float | None, keepdim: bool
) -> tuple[ir.Value, ir.Value]:
    """(variance, mean) over ``dim`` (every axis when None or empty), Bessel ``correction``."""
    rank = len(self.shape) if self.shape is not None else None
    axes = list(range(rank)) if not dim and rank is not None else list(dim or [])
    axes_value = op.Constant(value_ints=axes)
    mean = op.ReduceMean(self, axes_value, keepdims=1)
    centered = op.Sub(self, mean)
    total = op.ReduceSum(op.Mul(centered, centered), axes_value, keepdims=int(keepdim))
    sizes = op.Gather(op.Shape(self), axes_value, axis=0)
    count = op.CastLike(op.ReduceProd(sizes, keepdims=0), self)
    correction_value = op.CastLike(
        op.Constant(value_float=float(1.0 if correction is None else correction)), self
    )
    zero = op.CastLike(op.Constant(value_float=0.0), self)
    variance = op.Div(total, op.Max(op.Sub(count, correction_value), zero))
    if not keepdim:
        mean = op.Squeeze(mean, axes_value)
    return variance, mean


@onnx_op("aten::var.correction")
def aten_var_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> ir.Value:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    return _variance(self, dim, correction, keepdim)[0]


@onnx_op("aten::std.correction")
def aten_std_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> ir.Value:
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    return op.Sqrt(_variance(self, dim, correction, keepdim)[0])


@onnx_op("aten::var_mean.correction")
def aten_var_mean_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> tuple[ir.Value, ir.Value]:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    return _variance(self, dim, correction, keepdim)


@onnx_op("aten::std_mean.correction")
def aten_std_mean_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> tuple[ir.Value, ir.Value]:
    """std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    variance, mean = _variance(self, dim, correction, keepdim)
    return op.Sqrt(variance), mean


@onnx_op("aten::var")
def aten_var_all(self: ir.Value, unbiased: bool = True) -> ir.Value:
    """var(Tensor self, bool unbiased=True) -> Tensor: over every axis."""
    return _variance(self, None, float(unbiased), False)[0]


@onnx_op("aten::var.dim")
def aten_var_unbiased(
    self: ir.Value, dim: list[int] | None = None, unbiased: bool = True, keepdim: bool = False
) -> ir.Value:
    """var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor.

    The ``unbiased`` overloads torch.export keeps as the user wrote them (timm's weight
    standardisation): ``correction`` 1 or 0, with no trace of the node again.
    """
    return _variance(self, dim, float(unbiased), keepdim)[0]


@onnx_op("aten::std")
def aten_std_all(self: ir.Value, unbiased: bool = True) -> ir.Value:
    """std(Tensor self, bool unbiased=True) -> Tensor: over every axis."""
    return op.Sqrt(_variance(self, None, float(unbiased), False)[0])


@onnx_op("aten::std.dim")
def aten_std_unbiased(
    self: ir.Value, dim: list[int] | None = None, unbiased: bool = True, keepdim: bool = False
) -> ir.Value:
    """std.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor."""
    return op.Sqrt(_variance(self, dim, float(unbiased), keepdim)[0])


@onnx_op("aten::var_mean")
def aten_var_mean_all(self: ir.Value, unbiased: bool = True) -> tuple[ir.Value, ir.Value]:
    """var_mean(Tensor self, bool unbiased=True) -> (Tensor, Tensor): over every axis."""
    return _variance(self, None, float(unbiased), False)


@onnx_op("aten::var_mean.dim")
def aten_var_mean_unbiased(
    self: ir.Value, dim: list[int] | None = None, unbiased: bool = True, keepdim: bool = False
) -> tuple[ir.Value, ir.Value]:
    """var_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False)."""
    return _variance(self, dim, float(unbiased), keepdim)


@onnx_op("aten::std_mean")
def aten_std_mean_all(self: ir.Value, unbiased: bool = True) -> tuple[ir.Value, ir.Value]:
    """std_mean(Tensor self, bool unbiased=True) -> (Tensor, Tensor): over every axis."""
    variance, mean = _variance(self, None, float(unbiased), False)
    return op.Sqrt(variance), mean


@onnx_op("aten::std_mean.dim")
def aten_std_mean_unbiased(
    self: ir.Value, dim: list[int] | None = None, unbiased: bool = True, keepdim: bool = False
) -> tuple[ir.Value, ir.Value]:
    """std_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False)."""
    variance, mean = _variance(self, dim, float(unbiased), keepdim)
    return op.Sqrt(variance), mean


@onnx_op("aten::reshape_as")
def aten_reshape_as(self: ir.Value, other: ir.Value) -> ir.Value:
    """reshape_as(Tensor self, Tensor other) -> Tensor: ``Reshape`` to ``other``'s shape."""
    return op.Reshape(self, op.Shape(other))


aten_and_dunder = onnx_op("aten::__and__.Tensor")(_bitwise("And", "BitwiseAnd"))
aten_or_dunder = onnx_op("aten::__or__.Tensor")(_bitwise("Or", "BitwiseOr"))
aten_xor_dunder = onnx_op("aten::__xor__.Tensor")(_bitwise("Xor", "BitwiseXor"))
