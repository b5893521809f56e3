"""Our own ONNX functions for ops torchlib lacks, consulted after the user's and before torchlib's.

Each is plain Python calling ``onnxscript.opset18`` ops; the recorder turns the calls into
graph nodes. Keeping these ops whole also spares a ``run_decompositions`` re-trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import onnx_ir as ir
from onnxscript import opset18

__all__ = ["OWN_FUNCTIONS"]

_INT64_MAX = 2**63 - 1

# onnxscript types its ops with its own tensor classes; here they record ir.Values.
op: Any = opset18


def _cast_or_identity(self: ir.Value, dtype: int | None) -> Any:
    if dtype is None or dtype == -1:
        return op.Identity(self)
    return op.Cast(self, to=dtype)


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


OWN_FUNCTIONS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {
        "aten::to.dtype": aten_to_dtype,
        "aten::to.device": aten_to_device,
        "aten::to.dtype_layout": aten_to_dtype_layout,
        "aten::__and__.Tensor": _bitwise("And", "BitwiseAnd"),
        "aten::__or__.Tensor": _bitwise("Or", "BitwiseOr"),
        "aten::__xor__.Tensor": _bitwise("Xor", "BitwiseXor"),
        "aten::diff": aten_diff,
    }
)
