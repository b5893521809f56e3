"""Our own ONNX functions for ops torchlib lacks, consulted after the user's and before torchlib's.

Each is plain Python calling ``onnxscript.opset18`` ops; the recorder turns the calls into
graph nodes. Keeping these ops whole also spares a ``run_decompositions`` re-trace.
Parameters follow the ATen schema's argument names (``from`` is ``from_``).

``OWN_FUNCTIONS`` is the one table; the functions live by family:

- here: ``to``, bitwise dunders, ``diff``, ``var``/``std`` with ``correction``;
- ``math``: sign and float helpers, erf family, gcd/lcm, ``nextafter``;
- ``gamma``: lgamma, digamma, polygamma, zeta, incomplete gammas;
- ``bessel``: Bessel, modified Bessel, Airy (Cephes tables in ``_bessel_data``);
- ``polynomial``: orthogonal polynomials (an ONNX ``Loop`` over the degree);
- ``reduce`` / ``histogram``: amax/amin/all/any, scans, order
  statistics, sorted search / histograms;
- ``tensor`` / ``scatter``: copies, selection, conversion to
  complex, random sampling / scatter reductions, ``put``, ``segment_reduce``, MoE matmul;
- ``nn`` / ``pool`` / ``attention``: batch norm
  (training), padding, upsampling, ``im2col`` / pooling / attention and cross entropy;
- ``linalg`` / ``spectral``: LU, Cholesky, triangular solves and
  what builds on them / QR, Jacobi eigen- and singular values, ``pinv``, rank;
- ``complex``: ``OWN_COMPLEX_FUNCTIONS``, for complex inputs (real view).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import onnx_ir as ir
from onnxscript import opset18

from onnx_export.ops import attention as _attention
from onnx_export.ops import bessel as _bessel
from onnx_export.ops import complex as _complex
from onnx_export.ops import gamma as _gamma
from onnx_export.ops import histogram as _histogram
from onnx_export.ops import linalg as _linalg
from onnx_export.ops import math as _math
from onnx_export.ops import nn as _nn
from onnx_export.ops import polynomial as _polynomial
from onnx_export.ops import pool as _pool
from onnx_export.ops import reduce as _reduce
from onnx_export.ops import scatter as _scatter
from onnx_export.ops import spectral as _spectral
from onnx_export.ops import tensor as _tensor

__all__ = ["OWN_FUNCTIONS", "OWN_COMPLEX_FUNCTIONS"]

_INT64_MAX = 2**63 - 1

# onnxscript types its ops with its own tensor classes; here they record ir.Values.
op: Any = opset18


def _cast_or_identity(self: ir.Value, dtype: int | None) -> Any:
    if dtype is None or dtype == -1:
        return op.Identity(self)
    return _tensor.aten_to_copy(self, dtype)  # complex targets as real views


def aten_to_dtype(
    self: ir.Value,
    dtype: int,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str | None = None,
) -> Any:
    """to.dtype(Tensor self, ScalarType dtype, ...) -> Tensor."""
    return _cast_or_identity(self, dtype)


def aten_to_device(
    self: ir.Value,
    device: str,
    dtype: int,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str | None = None,
) -> Any:
    """to.device(Tensor self, Device device, ScalarType dtype, ...) -> Tensor."""
    return _cast_or_identity(self, dtype)


def aten_to_dtype_layout(
    self: ir.Value,
    dtype: int | None = None,
    layout: str | None = None,
    device: str | None = None,
    pin_memory: bool | None = None,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: str | None = None,
) -> Any:
    """to.dtype_layout(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor."""
    return _cast_or_identity(self, dtype)


def _bitwise(logical: str, bitwise: str) -> Callable[[ir.Value, ir.Value], ir.Value]:
    def function(self: ir.Value, other: ir.Value) -> Any:
        name = logical if self.dtype == ir.DataType.BOOL else bitwise
        return getattr(op, name)(self, other)  # type: ignore[no-any-return]

    function.__name__ = f"aten_{logical.lower()}_dunder"
    return function


def aten_diff(
    self: ir.Value,
    n: int = 1,
    dim: int = -1,
    prepend: ir.Value | None = None,
    append: ir.Value | None = None,
) -> Any:
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None)."""
    parts = [p for p in (prepend, self, append) if p is not None]
    result = op.Concat(*parts, axis=dim) if len(parts) > 1 else self
    axes = op.Constant(value_ints=[dim])
    for _ in range(n):
        later = op.Slice(
            result, op.Constant(value_ints=[1]), op.Constant(value_ints=[_INT64_MAX]), axes
        )
        earlier = op.Slice(result, op.Constant(value_ints=[0]), op.Constant(value_ints=[-1]), axes)
        result = (
            op.Xor(later, earlier) if self.dtype == ir.DataType.BOOL else op.Sub(later, earlier)
        )
    return result


def _variance(
    self: ir.Value, dim: list[int] | None, correction: float | None, keepdim: bool
) -> tuple[Any, Any]:
    """(variance, mean) over ``dim`` (all axes when None) with Bessel-style ``correction``."""
    rank = len(self.shape) if self.shape is not None else None
    axes = list(range(rank)) if dim is None and rank is not None else (dim or [])
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


def aten_var_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    return _variance(self, dim, correction, keepdim)[0]


def aten_std_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    return op.Sqrt(_variance(self, dim, correction, keepdim)[0])


def aten_var_mean_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    return _variance(self, dim, correction, keepdim)


def aten_std_mean_correction(
    self: ir.Value,
    dim: list[int] | None = None,
    correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    """std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, ...)."""
    variance, mean = _variance(self, dim, correction, keepdim)
    return op.Sqrt(variance), mean


OWN_FUNCTIONS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {
        **_math.FUNCTIONS,
        **_gamma.FUNCTIONS,
        **_bessel.FUNCTIONS,
        **_reduce.FUNCTIONS,
        **_histogram.FUNCTIONS,
        **_tensor.FUNCTIONS,
        **_scatter.FUNCTIONS,
        **_nn.FUNCTIONS,
        **_attention.FUNCTIONS,
        **_pool.FUNCTIONS,
        **_polynomial.FUNCTIONS,
        **_linalg.FUNCTIONS,
        **_spectral.FUNCTIONS,
        "aten::to.dtype": aten_to_dtype,
        "aten::to.device": aten_to_device,
        "aten::to.dtype_layout": aten_to_dtype_layout,
        "aten::__and__.Tensor": _bitwise("And", "BitwiseAnd"),
        "aten::__or__.Tensor": _bitwise("Or", "BitwiseOr"),
        "aten::__xor__.Tensor": _bitwise("Xor", "BitwiseXor"),
        "aten::diff": aten_diff,
        "aten::var.correction": aten_var_correction,
        "aten::std.correction": aten_std_correction,
        "aten::var_mean.correction": aten_var_mean_correction,
        "aten::std_mean.correction": aten_std_mean_correction,
    }
)

#: Our functions for complex-valued inputs (their real view, trailing dimension 2).
OWN_COMPLEX_FUNCTIONS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    dict(_complex.COMPLEX_FUNCTIONS)
)
