"""Evenly spaced values: ``linspace``, and ``arange`` with a floating result.

Torchlib's ``aten_linspace`` compares two graph values with Python's ``<``, which a
graph being recorded cannot answer ("'<' not supported between instances of 'Value'
and 'Value'"); this one records ``Less``. It computes as torch does: the first half
forwards from ``start``, the second half backwards from ``end`` (exact end points), in
the output's float dtype, or in double with ``start``/``end`` truncated for integers.
``steps`` may be a SymInt.

``arange`` with a floating result counts its elements as torch does, in double:
``ceil((end - start) / step)``. Torchlib's ``Range`` on float32 inputs counted in float32,
one element short where the quotient is a whole number after rounding
(``arange(1/6, 1.0, 1/6)``: 6 elements in torch, 5 in the file, which ONNX's checker then
refused; Idefics3's patch boundaries at 6 patches a side). The values are computed in
double too (``start + i * step``) and cast to the result's dtype, as torch's CPU kernel
does. Integer results keep torchlib's function (torch's own rules for them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import op, output_dtype
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_linspace", "aten_arange_start_step", "aten_arange_start", "aten_arange"]


def _scalar(value: Any, dtype: ir.DataType) -> ir.Value:
    if isinstance(value, ir.Value):
        scalar_shape = op.Constant(value=ir.tensor(np.zeros([0], dtype=np.int64)))
        return op.Cast(op.Reshape(value, scalar_shape), to=int(dtype))
    return op.Constant(value=ir.tensor(value, dtype=dtype))


def _truncated(value: Any, dtype: ir.DataType) -> Any:
    """``start``/``end`` of an integer linspace: truncated to ``dtype`` as torch does."""
    if isinstance(value, ir.Value):
        return op.Cast(value, to=int(dtype))
    return int(value)


@onnx_op(
    "aten::linspace",
    "aten::linspace.Tensor_Tensor",
    "aten::linspace.Tensor_Scalar",
    "aten::linspace.Scalar_Tensor",
)
def aten_linspace(
    start: Any,
    end: Any,
    steps: Any,
    dtype: int | None = None,
    layout: str | None = None,
    device: str | None = None,
    pin_memory: bool | None = None,
) -> ir.Value:
    """linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, ...)."""
    out = output_dtype(0, ir.DataType(dtype) if dtype not in (None, -1) else ir.DataType.FLOAT)
    integral = out.is_integer() or out == ir.DataType.BOOL
    compute = ir.DataType.DOUBLE if integral else out
    if integral:
        start, end = _truncated(start, out), _truncated(end, out)
    first, last = _scalar(start, compute), _scalar(end, compute)
    count = _scalar(steps, ir.DataType.INT64)
    positions = op.Cast(
        op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1)), to=int(compute)
    )
    total = op.Cast(count, to=int(compute))
    one = op.Constant(value=ir.tensor(1, dtype=compute))
    gaps = op.Max(op.Sub(total, one), one)  # steps == 1: no division by zero ([start])
    step = op.Div(op.Sub(last, first), gaps)
    half = op.Div(total, op.Constant(value=ir.tensor(2, dtype=compute)))
    values = op.Where(
        op.Less(positions, half),
        op.Add(first, op.Mul(step, positions)),
        op.Sub(last, op.Mul(step, op.Sub(op.Sub(total, one), positions))),
    )
    return op.Cast(values, to=int(out))


_FLOATING = frozenset(
    {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
)


def _floating_range(start: Any, end: Any, step: Any, out: ir.DataType) -> ir.Value:
    double = ir.DataType.DOUBLE
    values = op.Range(_scalar(start, double), _scalar(end, double), _scalar(step, double))
    return values if out == double else op.Cast(values, to=int(out))


@onnx_op("aten::arange.start_step")
def aten_arange_start_step(
    start: Any,
    end: Any,
    step: Any = 1,
    dtype: int = -1,
    layout: str = "",
    device: str = "",
    pin_memory: bool = False,
) -> ir.Value:
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype, ...)."""
    out = output_dtype(0)
    if out not in _FLOATING:
        from onnxscript.function_libs.torch_lib.ops.core import (
            aten_arange_start_step as torchlib_arange,
        )

        result: ir.Value = torchlib_arange(start, end, step, dtype, layout, device, pin_memory)
        return result
    return _floating_range(start, end, step, out)


@onnx_op("aten::arange.start")
def aten_arange_start(
    start: Any,
    end: Any,
    dtype: int = -1,
    layout: str = "",
    device: str = "",
    pin_memory: bool = False,
) -> ir.Value:
    """arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, ...)."""
    return aten_arange_start_step(start, end, 1, dtype, layout, device, pin_memory)


@onnx_op("aten::arange")
def aten_arange(
    end: Any, dtype: int = -1, layout: str = "", device: str = "", pin_memory: bool = False
) -> ir.Value:
    """arange(Scalar end, *, ScalarType? dtype=None, ...)."""
    return aten_arange_start_step(0, end, 1, dtype, layout, device, pin_memory)
