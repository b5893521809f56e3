"""``onnx_export_hf::group_query_attention``: a torch custom op that exports as GQA.

The op is what ``com.microsoft.GroupQueryAttention`` computes on ONNX Runtime's CPU
provider, written in torch for eager runs and parity checks, in GQA's own convention for
rows of different lengths (onnxruntime-genai's too): each row's tokens come first, padding
after them, and ``mask`` (the attention mask, batch by total length) only counts a row's
tokens. A prompt (no past) holds each row's tokens at positions 0 to its count - 1; a later
step appends each row's new tokens right after its own count of cached ones. Inside: rotary
embedding of the new queries and keys at those positions (optional, from cos/sin caches),
the new keys and values written into the presents there, the key/value heads repeated for
the query heads, causal (and sliding-window) masking up to each row's count, softcapping,
softmax, and 0 for a query that sees no key (as ORT gives).
:func:`group_query_attention_onnx` is its translation, registered per export, and
:func:`last_token_rows` picks each row's last token for the output head.
"""

from __future__ import annotations

from typing import Any

import torch

from onnx_export.passes.ort_gqa import LAST_TOKEN_ROWS_KEY

__all__ = [
    "group_query_attention",
    "group_query_attention_onnx",
    "last_token_rows",
    "last_token_rows_onnx",
]


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


def _starts(count: torch.Tensor, past: int, new: int) -> torch.Tensor:
    """Where each row's new tokens go, (batch,): 0 for a prompt, else count - new."""
    return torch.zeros_like(count) if past == 0 else count - new


def _write(past: torch.Tensor, new: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``past`` grown by the new positions, each row's new tokens written at its start."""
    present = torch.cat([past, torch.zeros_like(new)], dim=2)
    slots = starts[:, None] + torch.arange(new.shape[2])[None, :]  # batch, new
    index = slots[:, None, :, None].expand(-1, new.shape[1], -1, new.shape[3])
    return present.scatter(2, index, new)


@torch.library.custom_op("onnx_export_hf::group_query_attention", mutates_args=())
def group_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_key: torch.Tensor,
    past_value: torch.Tensor,
    mask: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    do_rotary: int,
    scale: float,
    softcap: float,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention over each row's cached + new keys: (batch, new, heads * head size), presents.

    ``query`` is (batch, heads, new, head size), ``key``/``value`` (batch, kv heads, new,
    head size), ``mask`` (batch, past + new) with each row's count of tokens (its layout is
    not read); ``cos_cache``/``sin_cache`` (positions, rotary / 2) are read only when
    ``do_rotary``: the new tokens rotate at their positions in the row (start + i).
    """
    new, past = key.shape[2], past_key.shape[2]
    count = mask.sum(dim=-1).long()  # (batch,): each row's tokens, cached and new
    starts = _starts(count, past, new)
    rows = starts[:, None] + torch.arange(new)[None, :]  # batch, new: the queries' positions
    if do_rotary:
        query = _rotate(query, cos_cache, sin_cache, rows)
        key = _rotate(key, cos_cache, sin_cache, rows)
    present_key = _write(past_key, key, starts)
    present_value = _write(past_value, value, starts)
    repeat = query.shape[1] // key.shape[1]
    keys = present_key.repeat_interleave(repeat, dim=1)
    values = present_value.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(query, keys.transpose(-1, -2)) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    columns = torch.arange(keys.shape[2])[None, None, :]
    allowed = (columns <= rows[:, :, None]) & (columns < count[:, None, None])  # batch, new, total
    if window > 0:
        allowed = allowed & (columns > rows[:, :, None] - window)
    allowed = allowed[:, None]  # batch, 1, new, total
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probabilities = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    sees = allowed.any(dim=-1, keepdim=True)
    out = (torch.matmul(probabilities, values) * sees).transpose(1, 2)
    return out.reshape(out.shape[0], out.shape[1], -1), present_key, present_value


@group_query_attention.register_fake
def _fake(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_key: torch.Tensor,
    past_value: torch.Tensor,
    mask: torch.Tensor,
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


def _lengths(mask: Any) -> Any:
    """Each row's last token's position, (batch,) int64: its count of tokens - 1."""
    from onnx_export.ops._opset import opset as op

    count = op.ReduceSum(mask, op.Constant(value_ints=[1]), keepdims=0)
    return op.Sub(count, op.Constant(value_int=1))


def group_query_attention_onnx(
    query: Any,
    key: Any,
    value: Any,
    past_key: Any,
    past_value: Any,
    mask: Any,
    cos_cache: Any,
    sin_cache: Any,
    do_rotary: int,
    scale: float,
    softcap: float,
    window: int,
) -> Any:
    """The op as one ``com.microsoft.GroupQueryAttention`` (inputs BSNH-packed).

    ``seqlens_k`` is each row's count of tokens - 1 (``ReduceSum`` of the mask),
    ``total_sequence_length`` the mask's width, a (1,) tensor; no ``attention_bias``.
    Every layer's copies of these are the same nodes, merged by the GQA pass's common
    subexpression elimination. The heads come from the past's shape and the query's
    packed width.
    """
    from onnx_export.ops._opset import opset as op

    packed = op.Constant(value_ints=[0, 0, -1])
    q = op.Reshape(op.Transpose(query, perm=[0, 2, 1, 3]), packed)
    k = op.Reshape(op.Transpose(key, perm=[0, 2, 1, 3]), packed)
    v = op.Reshape(op.Transpose(value, perm=[0, 2, 1, 3]), packed)
    seqlens_k = op.Cast(_lengths(mask), to=6)  # int32
    total = op.Cast(op.Shape(mask, start=1, end=2), to=6)
    rotary = (cos_cache, sin_cache) if do_rotary else (None, None)
    return _gqa_op()(
        q,
        k,
        v,
        past_key,
        past_value,
        seqlens_k,
        total,
        *rotary,
        num_heads=_heads(query),
        kv_num_heads=_heads(past_key),
        scale=scale,
        softcap=softcap,
        local_window_size=window if window > 0 else -1,
        do_rotary=do_rotary,
    )


@torch.library.custom_op("onnx_export_hf::last_token_rows", mutates_args=())
def last_token_rows(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's last token's hidden state, (batch, 1, hidden), from (batch, new, hidden).

    In a prompt a row's last token is at its count - 1; in a later step (each row
    appends the same number of new tokens) it is the last new one.
    """
    last = torch.clamp(mask.sum(dim=-1).long() - 1, max=hidden.shape[1] - 1)
    return hidden[torch.arange(hidden.shape[0]), last].unsqueeze(1)  # -1: the last, as ONNX


@last_token_rows.register_fake
def _fake_rows(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden.new_empty((hidden.shape[0], 1, hidden.shape[2]))


def last_token_rows_onnx(hidden: Any, mask: Any) -> Any:
    """``GatherND`` (batch_dims=1) at min(count - 1, new - 1), the count shared with GQA."""
    from onnx_export.ops._opset import opset as op

    one = op.Constant(value_ints=[1])
    new = op.Sub(op.Shape(hidden, start=1, end=2), one)
    last = op.Min(_lengths(mask), new)  # (batch,)
    index = op.Unsqueeze(last, op.Constant(value_ints=[1, 2]))  # (batch, 1, 1)
    rows = op.GatherND(hidden, index, batch_dims=1)
    node = rows.producer()
    if node is not None:  # the GQA pass finds it to take the last k positions on request
        node.metadata_props[LAST_TOKEN_ROWS_KEY] = "1"
    return rows


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
