"""Ops that ONNX opset 23 has as one node: ``Attention`` and ``RMSNormalization``.

When the model targets opset 23 or later (``ExportOptions(opset_version=23)``),
``scaled_dot_product_attention`` becomes ``Attention`` and ``rms_norm`` becomes
``RMSNormalization``, as ONNX intends (runtimes fuse them into their own kernels).
ONNX Runtime 1.32 runs both on CPU at opsets 23 and 24. Below 23, and for the cases
``Attention`` does not cover (inputs that are not 4-D, dropout), the composite functions
of earlier opsets are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import const, ints, op, rank
from onnx_export.ops._registration import onnx_op
from onnx_export.ops._target_opset import target_opset, versioned_node

__all__ = ["attention_node", "aten_rms_norm"]

_OPSET = 23  # Attention and RMSNormalization appear in opset 23
_HALF = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


def _versioned(op_type: str, inputs: Sequence[Any], attributes: dict[str, Any]) -> ir.Value:
    """One node of ``op_type`` at opset 23 (its own version; the converter keeps it)."""
    return versioned_node(op_type, inputs, attributes, _OPSET)


def attention_node(
    query: ir.Value,
    key: ir.Value,
    value: ir.Value,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> ir.Value | None:
    """SDPA as ONNX ``Attention`` when the target opset has it and it fits, else None.

    Fits: 4-D query/key/value (batch, heads, sequence, head size), no dropout, and not
    both a mask and ``is_causal`` (torch refuses that too). ONNX's ``Attention`` takes a
    bool mask (True attends) or an additive float mask, as torch does; its causal mask is
    aligned to the upper left, as torch's is; grouped-query heads follow ``enable_gqa``.
    """
    if target_opset() < _OPSET or dropout_p:
        return None
    if not (rank(query) == rank(key) == rank(value) == 4):
        return None
    if is_causal and attn_mask is not None:
        return None
    attributes: dict[str, Any] = {"is_causal": int(bool(is_causal))}
    if scale is not None:
        attributes["scale"] = float(scale)
    inputs: list[Any] = [query, key, value]
    if attn_mask is not None:
        inputs.append(
            attn_mask if attn_mask.dtype == ir.DataType.BOOL else op.CastLike(attn_mask, query)
        )
    return _versioned("Attention", inputs, attributes)


def _normalized_axes(x: ir.Value, normalized_shape: Sequence[int]) -> list[int]:
    count = len(normalized_shape)
    return list(range(-count, 0))


@onnx_op("aten::rms_norm")
def aten_rms_norm(
    input: ir.Value,
    normalized_shape: Sequence[int],
    weight: ir.Value | None = None,
    eps: float | None = None,
) -> ir.Value:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, float? eps).

    ``RMSNormalization`` at opset 23 and later; below, x / sqrt(mean(x^2) + eps) * weight
    computed in float32 for half-precision inputs (as torch computes it).
    """
    epsilon = eps if eps is not None else _finfo_eps(input.dtype)
    axes = _normalized_axes(input, normalized_shape)
    if target_opset() >= _OPSET:
        scale = weight if weight is not None else _ones(input, normalized_shape)
        attributes = {"axis": axes[0], "epsilon": float(epsilon)}
        return _versioned("RMSNormalization", [input, scale], attributes)
    x = op.Cast(input, to=int(ir.DataType.FLOAT)) if input.dtype in _HALF else input
    mean_square = op.ReduceMean(op.Mul(x, x), ints(axes), keepdims=1)
    normalized = op.Mul(x, op.Reciprocal(op.Sqrt(op.Add(mean_square, const(epsilon, x)))))
    result = op.CastLike(normalized, input) if x is not input else normalized
    return op.Mul(result, weight) if weight is not None else result


def _ones(like: ir.Value, shape: Sequence[int]) -> ir.Value:
    one = ir.tensor([1.0], dtype=ir.DataType.FLOAT)
    return op.CastLike(op.ConstantOfShape(ints([int(d) for d in shape]), value=one), like)


def _finfo_eps(dtype: ir.DataType | None) -> float:
    import torch

    from onnx_export._dtypes import to_torch_dtype

    torch_dtype = to_torch_dtype(dtype) if dtype is not None else torch.float32
    return float(torch.finfo(torch_dtype).eps)
