"""``onnx_export_hf::group_query_attention``: a torch custom op that exports as GQA.

The op is what ``com.microsoft.GroupQueryAttention`` computes on ONNX Runtime's CPU
provider, written in torch for eager runs and parity checks: rotary embedding of the new
queries and keys (optional, from cos/sin caches at the physical positions), the new keys and
values appended to the past ones (the presents), the key/value heads repeated for the
query heads, causal (and sliding-window) masking plus an additive ``attention_bias`` for
padding, softcapping, softmax, and 0 for a query that sees only padding (as ORT gives).
:func:`group_query_attention_onnx` is its translation, registered per export.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["group_query_attention", "group_query_attention_onnx"]


def _rotate(
    x: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """Rotary embedding (halves rotated, not interleaved) of the first cache-width dims."""
    cos = cos_cache[positions].unsqueeze(1)  # batch, 1, new, rotary / 2
    sin = sin_cache[positions].unsqueeze(1)
    half = cos.shape[-1]
    first, second, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    rotated = [first * cos - second * sin, second * cos + first * sin, rest]
    return torch.cat(rotated, dim=-1)


@torch.library.custom_op("onnx_export_hf::group_query_attention", mutates_args=())
def group_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_key: torch.Tensor,
    past_value: torch.Tensor,
    attention_bias: torch.Tensor,
    padding: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    do_rotary: int,
    scale: float,
    softcap: float,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention over past + new keys: (batch, new, heads * head size), presents.

    ``query`` is (batch, heads, new, head size), ``key``/``value`` (batch, kv heads, new,
    head size), ``attention_bias`` (batch, 1, new, total) 0 or the dtype's minimum,
    ``padding`` its (batch, total) row, which the ONNX translation reads the lengths from;
    ``cos_cache``/``sin_cache`` (positions, rotary / 2) are read only when ``do_rotary``:
    the new tokens rotate at their physical positions (past length + i), whatever the
    padding; the scores depend only on position differences, which the padding of a row
    shifts alike, so they are transformers' scores (the cached keys are not its keys).
    """
    if do_rotary:  # at the physical positions, as ORT does without position_ids
        positions = torch.arange(key.shape[2]).unsqueeze(0) + past_key.shape[2]
        query = _rotate(query, cos_cache, sin_cache, positions)
        key = _rotate(key, cos_cache, sin_cache, positions)
    present_key = torch.cat([past_key, key], dim=2)
    present_value = torch.cat([past_value, value], dim=2)
    repeat = query.shape[1] // key.shape[1]
    keys = present_key.repeat_interleave(repeat, dim=1)
    values = present_value.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(query, keys.transpose(-1, -2)) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    new, total = query.shape[2], keys.shape[2]
    rows = torch.arange(new).unsqueeze(1) + (total - new)
    columns = torch.arange(total).unsqueeze(0)
    allowed = columns <= rows
    if window > 0:
        allowed = allowed & (columns > rows - window)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min) + attention_bias
    probabilities = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    sees = (allowed & (attention_bias == 0)).any(dim=-1, keepdim=True)
    out = (torch.matmul(probabilities, values) * sees).transpose(1, 2)
    return out.reshape(out.shape[0], out.shape[1], -1), present_key, present_value


@group_query_attention.register_fake
def _fake(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_key: torch.Tensor,
    past_value: torch.Tensor,
    attention_bias: torch.Tensor,
    padding: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    do_rotary: int,
    scale: float,
    softcap: float,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, heads, new, size = query.shape
    total = past_key.shape[2] + key.shape[2]
    out = query.new_empty((batch, new, heads * value.shape[3]))
    present_key = key.new_empty((batch, key.shape[1], total, size))
    present_value = value.new_empty((batch, value.shape[1], total, value.shape[3]))
    return out, present_key, present_value


def group_query_attention_onnx(
    query: Any,
    key: Any,
    value: Any,
    past_key: Any,
    past_value: Any,
    attention_bias: Any,
    padding: Any,
    cos_cache: Any,
    sin_cache: Any,
    do_rotary: int,
    scale: float,
    softcap: float,
    window: int,
) -> Any:
    """The op as one ``com.microsoft.GroupQueryAttention`` (inputs BSNH-packed).

    ``seqlens_k`` is the total length - 1 for every row (the padding is in the bias):
    the last 0 of each ``padding`` row, as left padding keeps the last position real
    (one ``ArgMax``); ``total_sequence_length`` is ``padding``'s width, a (1,) tensor.
    Every layer's copies of these are the same nodes, merged by the GQA pass's common
    subexpression elimination. The heads come from the past's shape and the query's
    packed width.
    """
    import onnx_ir as ir

    from onnx_export.ops._opset import opset as op

    packed = op.Constant(value_ints=[0, 0, -1])
    q = op.Reshape(op.Transpose(query, perm=[0, 2, 1, 3]), packed)
    k = op.Reshape(op.Transpose(key, perm=[0, 2, 1, 3]), packed)
    v = op.Reshape(op.Transpose(value, perm=[0, 2, 1, 3]), packed)
    if getattr(padding, "dtype", None) != ir.DataType.FLOAT:  # ORT's CPU ArgMax: float
        padding = op.Cast(padding, to=ir.DataType.FLOAT)
    last = op.ArgMax(padding, axis=1, keepdims=0, select_last_index=1)  # (batch,)
    seqlens_k = op.Cast(last, to=6)  # int32
    total = op.Cast(op.Shape(padding, start=1, end=2), to=6)
    rotary = (cos_cache, sin_cache, None) if do_rotary else (None, None, None)
    return _gqa_op()(
        q,
        k,
        v,
        past_key,
        past_value,
        seqlens_k,
        total,
        *rotary,
        attention_bias,
        num_heads=_heads(query),
        kv_num_heads=_heads(past_key),
        scale=scale,
        softcap=softcap,
        local_window_size=window if window > 0 else -1,
        do_rotary=do_rotary,
    )


def _heads(value: Any) -> int:
    """The static head count (dim 1) of a BNSH value being recorded."""
    shape = getattr(value, "shape", None)
    dim = shape[1] if shape is not None and len(shape) == 4 else None
    if not isinstance(dim, int):
        raise ValueError(f"GroupQueryAttention needs a static head count, got shape {shape}.")
    return dim


def _gqa_op() -> Any:
    """Onnxscript's handle on ``com.microsoft.GroupQueryAttention`` (three outputs).

    The ONNX schema registry does not know ONNX Runtime's contrib ops: the schema is
    declared here with the inputs and attributes we use (ORT checks the node at load).
    """
    from onnx.defs import OpSchema
    from onnxscript.values import Op, Opset

    param, optional = OpSchema.FormalParameter, OpSchema.FormalParameterOption.Optional
    inputs = [param("query", "T")]
    inputs += [param(n, "T", param_option=optional) for n in ("key", "value")]
    inputs += [param(n, "T", param_option=optional) for n in ("past_key", "past_value")]
    inputs += [param("seqlens_k", "M"), param("total_sequence_length", "M")]
    inputs += [param(n, "T", param_option=optional) for n in ("cos_cache", "sin_cache")]
    inputs += [param("position_ids", "tensor(int64)", param_option=optional)]
    inputs += [param("attention_bias", "T", param_option=optional)]
    outputs = [param(n, "T") for n in ("output", "present_key", "present_value")]
    attributes = [
        OpSchema.Attribute(name, kind, "")
        for name, kind in (
            ("num_heads", OpSchema.AttrType.INT),
            ("kv_num_heads", OpSchema.AttrType.INT),
            ("scale", OpSchema.AttrType.FLOAT),
            ("softcap", OpSchema.AttrType.FLOAT),
            ("local_window_size", OpSchema.AttrType.INT),
            ("do_rotary", OpSchema.AttrType.INT),
            ("rotary_interleaved", OpSchema.AttrType.INT),
        )
    ]
    floats = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
    schema = OpSchema(
        "GroupQueryAttention",
        "com.microsoft",
        1,
        inputs=inputs,
        outputs=outputs,
        type_constraints=[("T", floats, ""), ("M", ["tensor(int32)"], "")],
        attributes=attributes,
    )
    return Op(Opset("com.microsoft", 1), "GroupQueryAttention", schema)
