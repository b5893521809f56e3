"""Ops that ONNX opset 21 has as one node: ``GroupNormalization``.

Opset 21 redefined ``GroupNormalization`` with torch's semantics (one scale and one bias
per channel, statistics in float32 for half inputs), so when the model targets opset 21 or
later ``group_norm`` becomes that node. Below 21 torchlib's decomposition is kept
(``InstanceNormalization`` over the groups, then the per-channel affine).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_export.ops._common import op
from onnx_export.ops._registration import onnx_op
from onnx_export.ops._target_opset import target_opset, versioned_node

__all__ = ["aten_group_norm"]

_OPSET = 21  # GroupNormalization-21: per-channel scale and bias (18's were per group)


def _per_channel(input: ir.Value, fill: float) -> ir.Value:
    """A 1-D tensor of ``fill`` with one element per channel (axis 1) of ``input``."""
    filler = op.CastLike(op.Constant(value_floats=[fill]), input)
    return op.Expand(filler, op.Shape(input, start=1, end=2))


@onnx_op("aten::group_norm")
def aten_group_norm(
    input: ir.Value,
    num_groups: int,
    weight: ir.Value | None = None,
    bias: ir.Value | None = None,
    eps: float = 1e-05,
    cudnn_enabled: bool = True,
) -> ir.Value:
    """group_norm(Tensor input, int num_groups, Tensor? weight, Tensor? bias, float eps, bool).

    ``GroupNormalization`` (opset 21's, per-channel scale and bias) at opset 21 and later;
    torchlib's decomposition below.
    """
    if target_opset() < _OPSET:
        from onnxscript.function_libs.torch_lib.ops.nn import (
            aten_group_norm as torchlib_group_norm,
        )

        result: ir.Value = torchlib_group_norm(input, num_groups, weight, bias, eps, cudnn_enabled)
        return result
    scale = op.CastLike(weight, input) if weight is not None else _per_channel(input, 1.0)
    shift = op.CastLike(bias, input) if bias is not None else _per_channel(input, 0.0)
    attributes = {"num_groups": int(num_groups), "epsilon": float(eps), "stash_type": 1}
    return versioned_node("GroupNormalization", [input, scale, shift], attributes, _OPSET)
