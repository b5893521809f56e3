"""``floor_divide`` of floating tensors as ATen computes it, not as ``Floor(Div)``.

torchlib writes ``a // b`` on floats as ``Floor(a / b)``. ATen (``div_floor_floating``)
takes the remainder first: ``(a - fmod(a, b)) / b``, one less when the remainder's sign
is not the divisor's, then the floor, rounded up when it is more than one half below
(so that Python's ``a // b`` is an integer next to the true quotient). The two differ
where ``a / b`` rounds up to an integer: ``1.0 // 0.1`` is ``9.0`` in torch and Python,
``10.0`` as ``Floor(Div)``. Integer models built on that (I-BERT's integer GELU computes
``1.0 // scaling_factor``) then shift every output. A divisor of zero gives ``a / b``
(IEEE), as in ATen. Integer inputs are torchlib's.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import cast_to, const, is_float, op, output_dtype
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_floor_divide"]


def _floor_divide_floating(a: ir.Value, b: ir.Value) -> ir.Value:
    zero = const(0.0, a)
    mod = op.Mod(a, b, fmod=1)
    div = op.Div(op.Sub(a, mod), b)
    sign_differs = op.Not(op.Equal(op.Less(b, zero), op.Less(mod, zero)))
    wrong_side = op.And(op.Not(op.Equal(mod, zero)), sign_differs)
    div = op.Where(wrong_side, op.Sub(div, const(1.0, a)), div)
    floor = op.Floor(div)
    floor = op.Where(
        op.Greater(op.Sub(div, floor), const(0.5, a)), op.Add(floor, const(1.0, a)), floor
    )
    quotient = op.Div(a, b)
    signed_zero = op.Mul(zero, quotient)  # copysign(0, a / b)
    result = op.Where(op.Equal(div, zero), signed_zero, floor)
    return op.Where(op.Equal(b, zero), quotient, result)


@onnx_op("aten::floor_divide")
def aten_floor_divide(self: Any, other: Any) -> ir.Value:
    """floor_divide(Tensor self, Tensor other) -> Tensor."""
    out = output_dtype(0)
    tensors = [x for x in (self, other) if isinstance(x, ir.Value)]
    floating = out is not None and out.is_floating_point()
    if not floating or not tensors or not all(is_float(x) for x in tensors):
        from onnxscript.function_libs.torch_lib.ops.core import (
            aten_floor_divide as torchlib_floor_divide,
        )

        result: ir.Value = torchlib_floor_divide(self, other)
        return result
    like = cast_to(tensors[0], out)
    a = cast_to(self, out) if isinstance(self, ir.Value) else const(float(self), like)
    b = cast_to(other, out) if isinstance(other, ir.Value) else const(float(other), like)
    return _floor_divide_floating(a, b)
