"""Evenly spaced values: ``linspace``.

Torchlib's ``aten_linspace`` compares two graph values with Python's ``<``, which a
graph being recorded cannot answer ("'<' not supported between instances of 'Value'
and 'Value'"); this one records ``Less``. It computes as torch does: the first half
forwards from ``start``, the second half backwards from ``end`` (exact end points), in
the output's float dtype, or in double with ``start``/``end`` truncated for integers.
``steps`` may be a SymInt.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import op, output_dtype
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_linspace"]


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
