"""Ops that ONNX opset 20 has as one node: ``Gelu``.

Opset 20 added ``Gelu`` with both of torch's forms (``approximate="none"``, the exact
``x * Φ(x)``, and ``"tanh"``), so when the model targets opset 20 or later
(``ExportOptions(opset_version=20)``) ``aten::gelu`` becomes that node, as torch.onnx
does. Below 20 torchlib's composite is kept (the exact form is still fused into ``Gelu``
by ``passes.gelu`` when the model is converted to 20 or later; the tanh form is not,
which is why the choice is made here, at translation).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_export.ops._common import builder
from onnx_export.ops._registration import onnx_op
from onnx_export.ops._target_opset import target_opset

__all__ = ["aten_gelu"]

_OPSET = 20  # Gelu appears in opset 20
_APPROXIMATIONS = ("none", "tanh")


@onnx_op("aten::gelu")
def aten_gelu(self: ir.Value, approximate: str = "none") -> ir.Value:
    """gelu(Tensor self, *, str approximate='none') -> Tensor.

    One ``Gelu`` node (its own opset 20, which the version converter keeps) at opset 20
    and later; torchlib's composite below 20.
    """
    if target_opset() < _OPSET or approximate not in _APPROXIMATIONS:
        from onnxscript.function_libs.torch_lib.ops.nn import aten_gelu as torchlib_gelu

        composite: ir.Value = torchlib_gelu(self, approximate)
        return composite
    result = builder().call_op("Gelu", [self], {"approximate": approximate}, version=_OPSET)
    assert isinstance(result, ir.Value)  # one output: our invariant
    return result
