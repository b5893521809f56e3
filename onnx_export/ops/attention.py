"""Attention and losses torchlib gets wrong or lacks.

``scaled_dot_product_attention`` on inputs that are not 4-D and on 4-D ones with a bool
mask (torchlib's is used for the rest), and ``cross_entropy_loss`` with probability
targets, unbatched inputs, class weights and label smoothing.
"""

from __future__ import annotations

import math
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import (
    const,
    ints,
    known_shape,
    op,
    rank,
    static_size,
)
from onnx_export.ops._registration import onnx_op
from onnx_export.ops._target_opset import target_runtime
from onnx_export.ops.opset23 import attention_node

__all__ = [
    "aten_scaled_dot_product_attention",
    "aten_scaled_dot_product_flash_attention_for_cpu",
    "aten_cross_entropy_loss",
]


def _repeat_heads(x: ir.Value, repeat: int, heads: int, r: int) -> ir.Value:
    """Grouped-query attention: repeat each of ``x``'s heads (axis ``r - 3``) ``repeat`` times."""
    expanded = op.Expand(
        op.Unsqueeze(x, ints([r - 2])),
        op.Concat(op.Shape(x, start=0, end=r - 2), ints([repeat, 1, 1]), axis=0),
    )
    shape = op.Concat(
        op.Shape(x, start=0, end=r - 3), ints([heads]), op.Shape(x, start=r - 2), axis=0
    )
    return op.Reshape(expanded, shape)


@onnx_op("aten::scaled_dot_product_attention")
def aten_scaled_dot_product_attention(
    query: ir.Value,
    key: ir.Value,
    value: ir.Value,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> ir.Value:
    """scaled_dot_product_attention(...): torchlib's for 4-D inputs, any rank >= 2 here."""
    fused = attention_node(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if fused is not None:  # opset >= 23: ONNX's own Attention (see ops/opset23.py)
        return fused
    if (
        rank(query) == 4
        and rank(key) == 4
        and rank(value) == 4
        and not _own_4d(query, attn_mask, dropout_p)
    ):
        from onnxscript.function_libs.torch_lib.ops.nn import (
            aten_scaled_dot_product_attention as torchlib_sdpa,
        )

        result: ir.Value = torchlib_sdpa(
            query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
        )
        return _zero_fully_masked_rows(result, attn_mask)
    scores, v = _masked_scores(query, key, value, attn_mask, is_causal, scale, enable_gqa)
    weights = op.Softmax(scores, axis=-1)
    return _zero_fully_masked_rows(op.MatMul(weights, v), attn_mask)


@onnx_op("aten::_scaled_dot_product_flash_attention_for_cpu")
def aten_scaled_dot_product_flash_attention_for_cpu(
    query: ir.Value,
    key: ir.Value,
    value: ir.Value,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    attn_mask: Any = None,
    scale: float | None = None,
) -> tuple[ir.Value, ir.Value]:
    """_scaled_dot_product_flash_attention_for_cpu(...) -> (output, logsumexp).

    torchlib's gives a ``logsumexp`` of zeros shaped (batch, length, heads rounded up to
    32); torch's is the log-sum-exp over the keys of each query's scaled, masked scores,
    (batch, heads, length) in float32.
    """
    output = aten_scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale
    )
    scores, _ = _masked_scores(query, key, value, attn_mask, is_causal, scale, False)
    logsumexp = op.ReduceLogSumExp(scores, ints([-1]), keepdims=0)
    return output, op.Cast(logsumexp, to=int(ir.DataType.FLOAT))


def _masked_scores(
    query: ir.Value,
    key: ir.Value,
    value: ir.Value,
    attn_mask: Any,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> tuple[ir.Value, ir.Value]:
    """Scaled query-key scores with the causal and given masks applied, and the values."""
    dims = known_shape(query, "query")
    width = static_size(dims[-1], "head size (last dimension of query)")
    factor = scale if scale is not None else 1.0 / math.sqrt(width)
    k, v = key, value
    if enable_gqa and rank(query) is not None and rank(query) >= 3:  # type: ignore[operator]
        heads_q, heads_k = dims[-3], (key.shape or [0, 0, 0])[-3]
        if isinstance(heads_q, int) and isinstance(heads_k, int) and heads_q != heads_k:
            repeat = heads_q // heads_k
            r = rank(key) or 3
            k, v = _repeat_heads(key, repeat, heads_q, r), _repeat_heads(value, repeat, heads_q, r)
    scores = op.Mul(
        op.MatMul(query, op.Transpose(k, perm=_swap_last(rank(key) or 2))), const(factor, query)
    )
    if is_causal:
        ones = op.ConstantOfShape(
            op.Concat(op.Shape(query, start=-2, end=-1), op.Shape(k, start=-2, end=-1), axis=0),
            value=ir.tensor([1], dtype=ir.DataType.INT32),
        )
        allowed = op.Cast(op.Trilu(ones, upper=0), to=int(ir.DataType.BOOL))
        scores = op.Where(allowed, scores, const(float("-inf"), query))
    if attn_mask is not None:
        if attn_mask.dtype == ir.DataType.BOOL:
            scores = op.Where(attn_mask, scores, const(float("-inf"), query))
        else:
            scores = op.Add(scores, op.CastLike(attn_mask, scores))
    return scores, v


def _own_4d(query: ir.Value, attn_mask: Any, dropout_p: float) -> bool:
    """Whether a 4-D call with a bool mask takes our path below instead of torchlib's.

    torchlib's bool-mask path fills masked scores with the dtype's lowest value, so a row
    that hides every key comes out as the mean of the values, and its ``IsNaN`` + ``Where``
    per layer never fires; ours zeros such rows with one ``Where`` per layer (the mask's
    check is shared by the layers), so the graph is a node a layer smaller, not larger.
    Dropout, a dynamic head size and ``target="onnxruntime"`` (whose fusions match
    torchlib's pattern) keep torchlib's.
    """
    if attn_mask is None or attn_mask.dtype != ir.DataType.BOOL or dropout_p != 0.0:
        return False
    if target_runtime() == "onnxruntime":
        return False
    shape = query.shape
    return shape is not None and isinstance(shape[-1], int)


def _zero_fully_masked_rows(result: ir.Value, attn_mask: Any) -> ir.Value:
    """Zeros where the mask lets a query attend to no key, as torch's SDPA gives.

    torch (since 2.5) computes SDPA through a safe softmax: a query whose keys are all
    masked (bool ``False``, or ``-inf`` in a float mask) gives 0. ONNX's Softmax over such
    a row is undefined (NaN for ``-inf``; ONNX Runtime spreads torchlib's ``finfo.min``
    fill evenly), and NaN spreads: the next layer multiplies the masked value by a weight
    of 0. A float mask that is only very negative (``finfo.min``, ``-1e4``) is no
    ``-inf``: torch gives the mean of the values there, and so does the graph.

    The check reads the mask only (one ``ReduceMax`` over its key axis, shared by the
    layers that use the same mask) and zeros the output with one ``Where`` per layer.
    For ``target="onnxruntime"`` it is left out for bool masks: torchlib's bool path fills
    with ``finfo.min`` (no NaN; the row is the mean of the values, or what ONNX Runtime's
    fused kernel gives), and the check cost Llama its ``SkipSimplifiedLayerNormalization``
    fusion. Float masks keep it there: without it a row of ``-inf`` gave NaN, fused
    (``MultiHeadAttention`` with an attention bias) or not, and the fusion still applies.
    """
    if attn_mask is None:
        return result
    if attn_mask.dtype == ir.DataType.BOOL and target_runtime() == "onnxruntime":
        return result
    return op.Where(_fully_masked_rows(attn_mask), const(0.0, result), result)


def _fully_masked_rows(attn_mask: ir.Value) -> ir.Value:
    """Bool, True where a row of ``attn_mask`` (last axis: the keys) masks every key.

    A bool mask masks with ``False``; a float (additive) mask with ``-inf``. The result
    keeps the key axis (size 1), so it broadcasts against the attention's output.
    """
    if attn_mask.dtype == ir.DataType.BOOL:
        as_int = op.Cast(attn_mask, to=int(ir.DataType.INT32))
        return op.Not(
            op.Cast(op.ReduceMax(as_int, ints([-1]), keepdims=1), to=int(ir.DataType.BOOL))
        )
    highest = op.ReduceMax(attn_mask, ints([-1]), keepdims=1)
    if attn_mask.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
        highest = op.Cast(highest, to=int(ir.DataType.FLOAT))  # IsInf: float and double
    return op.IsInf(highest, detect_negative=1, detect_positive=0)


def _swap_last(r: int) -> list[int]:
    return [*range(r - 2), r - 1, r - 2]


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@onnx_op("aten::cross_entropy_loss")
def aten_cross_entropy_loss(
    self: ir.Value,
    target: ir.Value,
    weight: Any = None,
    reduction: int = 1,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> ir.Value:
    """cross_entropy_loss(Tensor self, Tensor target, ...): class indices or probabilities."""
    unbatched = rank(self) == 1
    x = op.Unsqueeze(self, ints([0])) if unbatched else self
    tgt = op.Unsqueeze(target, ints([0])) if unbatched else target
    log_probs = op.LogSoftmax(x, axis=1)
    classes = op.CastLike(op.Reshape(op.Shape(x, start=1, end=2), ints([])), x)
    r = (rank(self) or 1) + (1 if unbatched else 0)
    weight_shape = [1, -1] + [1] * (r - 2)
    kind = _REDUCTIONS[int(reduction)]
    if target.dtype not in (ir.DataType.INT64, ir.DataType.INT32):
        smoothed = tgt
        if label_smoothing:
            smoothed = op.Add(
                op.Mul(tgt, const(1.0 - label_smoothing, x)),
                op.Div(const(label_smoothing, x), classes),
            )
        terms = op.Mul(log_probs, smoothed)
        if weight is not None:
            terms = op.Mul(terms, op.Reshape(weight, ints(weight_shape)))
        loss = op.Neg(op.ReduceSum(terms, ints([1]), keepdims=0))
        if kind == "none":
            return op.Squeeze(loss, ints([0])) if unbatched else loss
        total = op.ReduceSum(loss, keepdims=0)
        if kind == "sum":
            return total
        count = op.Div(op.CastLike(op.Size(x), x), classes)
        return op.Div(total, count)
    valid = op.Not(op.Equal(tgt, op.CastLike(const(ignore_index, tgt), tgt)))
    safe = op.Where(valid, tgt, op.CastLike(op.Constant(value_int=0), tgt))
    picked = op.Squeeze(
        op.GatherElements(log_probs, op.Unsqueeze(safe, ints([1])), axis=1), ints([1])
    )
    mask = op.CastLike(valid, x)
    class_weight = op.Gather(weight, safe, axis=0) if weight is not None else const(1.0, x)
    sample_weight = op.Mul(class_weight, mask)
    loss = op.Neg(op.Mul(picked, sample_weight))
    if label_smoothing:
        everything = log_probs
        if weight is not None:
            everything = op.Mul(everything, op.Reshape(weight, ints(weight_shape)))
        smooth = op.Mul(op.Neg(op.ReduceSum(everything, ints([1]), keepdims=0)), mask)
        loss = op.Add(
            op.Mul(loss, const(1.0 - label_smoothing, x)),
            op.Mul(smooth, op.Div(const(label_smoothing, x), classes)),
        )
    if kind == "none":
        return op.Squeeze(loss, ints([0])) if unbatched else loss
    total = op.ReduceSum(loss, keepdims=0)
    if kind == "sum":
        return total
    denominator = op.ReduceSum(op.Mul(op.Expand(class_weight, op.Shape(mask)), mask), keepdims=0)
    return op.Div(total, denominator)
