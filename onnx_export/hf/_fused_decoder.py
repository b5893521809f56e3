"""The decoder graph for ``target="onnxruntime"``: one ``GroupQueryAttention`` per layer.

Instead of finding attention again in the traced graph (a pattern that each family and
each transformers release draws differently), the model is exported with an attention
implementation of our own (transformers' ``AttentionInterface``): every layer's attention
call becomes one ``onnx_export_hf::group_query_attention`` custom op, translated to
``com.microsoft.GroupQueryAttention``. Whatever the family does before attention (its
projections, rotary flavour, q/k norms) stays as transformers wrote it; the cache concat,
the repeat of the key/value heads, the causal and padding masks and the softmax are all
inside the one op.

Inputs and outputs are those of the default target, so the same runtime drives both:
``input_ids``, ``attention_mask`` (batch, total length: left padding is 0),
``position_ids``, ``past_key_values.{i}.key`` / ``.value`` (batch, kv heads, past length,
head size: GQA's BNSH layout); outputs ``logits`` and ``present.{i}.key`` / ``.value``.
Inside the graph, ``seqlens_k`` is the total length - 1 for every row and the padding
enters as GQA's ``attention_bias`` (0 or the dtype's minimum, batch x 1 x new x total), so
left-padded rows give the tokens transformers gives. ``logits`` holds the last position
only (transformers' ``logits_to_keep=1``): (batch, 1, vocab).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from onnx_export.hf._graphs import GraphSpec

__all__ = [
    "ATTENTION_NAME",
    "FusedCausalLM",
    "fused_causal_lm_graph",
    "onnxruntime_graphs",
    "supports_fused_attention",
    "with_fused_ops",
]

#: The name our attention implementation is registered under in transformers.
ATTENTION_NAME = "onnx_export_gqa"

#: Keywords transformers passes on to attention implementations that GQA handles or that
#: do not change the result (anything else, e.g. attention sinks, keeps the default graph).
_KNOWN_KWARGS = {
    "dropout",
    "scaling",
    "softcap",
    "sliding_window",
    "position_ids",
    "is_causal",
    "use_cache",
    "output_attentions",
    "cache_position",
    "return_dict",
    "output_hidden_states",
}


@torch.library.custom_op("onnx_export_hf::group_query_attention", mutates_args=())
def group_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_key: torch.Tensor,
    past_value: torch.Tensor,
    attention_bias: torch.Tensor,
    scale: float,
    softcap: float,
    window: int,
    num_heads: int,
    kv_num_heads: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Causal attention over past + new keys: (batch, new, heads * head size), presents.

    ``query`` is (batch, heads, new, head size), ``key``/``value`` (batch, kv heads, new,
    head size), ``attention_bias`` (batch, 1, new, total) holds the padding (0 or minimum).
    """
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
    # ORT gives 0 for a query that sees padding only (a padded position of the prompt).
    sees = (allowed & (attention_bias == 0)).any(dim=-1, keepdim=True)
    out = (torch.matmul(probabilities, values) * sees).transpose(1, 2)
    return out.reshape(out.shape[0], out.shape[1], -1), present_key, present_value


@group_query_attention.register_fake
def _group_query_attention_fake(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_key: torch.Tensor,
    past_value: torch.Tensor,
    attention_bias: torch.Tensor,
    scale: float,
    softcap: float,
    window: int,
    num_heads: int,
    kv_num_heads: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, heads, new, size = query.shape
    total = past_key.shape[2] + key.shape[2]
    out = query.new_empty((batch, new, heads * size))
    present_key = key.new_empty((batch, key.shape[1], total, size))
    present_value = value.new_empty((batch, value.shape[1], total, value.shape[3]))
    return out, present_key, present_value


class _Step:
    """What the wrapper hands the attention calls of one forward: pasts, bias; presents."""

    def __init__(self, past: list[dict[str, torch.Tensor]], bias: torch.Tensor) -> None:
        self.past = past
        self.bias = bias
        self.presents: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


_CURRENT: list[_Step] = []


def _attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Transformers' attention interface: one custom op; ``key``/``value`` are the new ones."""
    unknown = sorted(k for k, v in kwargs.items() if k not in _KNOWN_KWARGS and v is not None)
    if unknown or not _CURRENT:
        raise _NotFusable(
            f"{type(module).__name__} passes {unknown} to its attention"
            if unknown
            else "attention ran outside the fused wrapper"
        )
    step = _CURRENT[-1]
    layer = int(getattr(module, "layer_idx", len(step.presents)))
    past = step.past[layer]
    scale = kwargs.get("scaling")
    softcap = kwargs.get("softcap")
    window = kwargs.get("sliding_window")
    out, present_key, present_value = group_query_attention(
        query,
        key,
        value,
        past["key"],
        past["value"],
        step.bias.to(query.dtype),
        float(query.shape[-1] ** -0.5 if scale is None else scale),
        float(softcap or 0.0),
        int(window or 0),
        int(query.shape[1]),
        int(key.shape[1]),
    )
    step.presents[layer] = (present_key, present_value)
    return out.reshape(out.shape[0], out.shape[1], query.shape[1], -1), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The masks are built once from ``attention_mask`` by the wrapper (GQA's bias)."""
    return None


class _NotFusable(Exception):
    """The model's attention cannot be replaced by GroupQueryAttention."""


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, _attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_mask)


@contextlib.contextmanager
def _attention_set(model: Any) -> Iterator[None]:
    """``model`` uses our attention inside the block, its own again after it."""
    _register()
    before = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def supports_fused_attention(model: Any) -> bool:
    """Whether ``model``'s family calls transformers' attention interface."""
    return bool(getattr(model, "_supports_attention_backend", False))


class _KeepNew:
    """Stands in for ``DynamicCache.update``: the cache update happens inside GQA."""

    @staticmethod
    def update(
        key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return key, value


class FusedCausalLM(nn.Module):
    """A causal LM whose attention is GroupQueryAttention; same inputs and outputs as default.

    Each call switches the model to our attention implementation and back, so the
    wrapped model is left as it was (eager checks and the export both go through here).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        from onnx_export.hf._graphs import cache_keyword

        self.model = model
        self.cache_keyword = cache_keyword(model)
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One step: the prompt (past length 0) or the next tokens."""
        from onnx_export.hf._graphs import dynamic_cache

        cache = dynamic_cache(past_key_values)
        cache.update = _keep_new  # GQA appends to the cache itself
        dtype = past_key_values[0]["key"].dtype
        padding = (attention_mask == 0)[:, None, None, :]
        bias = torch.zeros(padding.shape, dtype=dtype).masked_fill(padding, torch.finfo(dtype).min)
        step = _Step(past_key_values, bias.expand(-1, -1, input_ids.shape[1], -1))
        extra = {"logits_to_keep": 1} if self.keeps_logits else {}
        _CURRENT.append(step)
        try:
            with _attention_set(self.model):
                out = self.model(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    position_ids=position_ids,
                    use_cache=True,
                    **{self.cache_keyword: cache},
                    **extra,
                )
        finally:
            _CURRENT.pop()
        layers = len(past_key_values)
        if sorted(step.presents) != list(range(layers)):
            raise _NotFusable(f"{len(step.presents)} of {layers} layers called the interface")
        logits = out.logits if self.keeps_logits else out.logits[:, -1:, :]
        presents = [{"key": k, "value": v} for k, v in (step.presents[i] for i in range(layers))]
        return {"logits": logits, "present": presents}


def _keep_new(
    key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``DynamicCache.update`` that keeps the cache as it was and returns the new tokens."""
    return key, value


@dataclasses.dataclass(frozen=True)
class FusedGraphSpec(GraphSpec):
    """A fused decoder's spec; checked against eager on ``check_args``, a prompt.

    ORT's CPU GroupQueryAttention takes several new tokens on top of a past for batch 1
    only, so the export's example inputs (batch 2, 3 tokens after 4) are not run; the
    check runs a left-padded batch-2 prompt (past length 0) instead.
    """

    check_args: tuple[Any, ...] = ()


def _prompt_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    ids, _, _, past = args
    batch, length = ids.shape[0], ids.shape[1] + 1
    prompt = torch.randint(0, 50, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, :2] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    empty = [{n: t[:, :, :0] for n, t in layer.items()} for layer in past]
    return prompt, mask, positions, empty


def fused_causal_lm_graph(model: Any, spec: GraphSpec) -> GraphSpec | str:
    """``spec`` with :class:`FusedCausalLM` as its module, or why it cannot have it.

    Runs the wrapper once eagerly on the example inputs to check that every layer goes
    through the attention interface and that nothing GQA cannot take is passed to it.
    """
    if not supports_fused_attention(model):
        return "its attention does not go through transformers' attention interface"
    past = spec.args[3]
    head_size = int(past[0]["key"].shape[-1]) if past else 0
    if head_size % 8:
        return f"its head size {head_size} is not a multiple of 8 (ORT's CPU kernel needs it)"
    module = FusedCausalLM(model)
    try:
        with torch.no_grad():
            module(*spec.args)
    except _NotFusable as e:
        return str(e)
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return FusedGraphSpec(**{**fields, "module": module}, check_args=_prompt_args(spec.args))


def onnxruntime_graphs(model: Any, task: str, specs: list[GraphSpec]) -> list[GraphSpec]:
    """The graphs to export for ``target="onnxruntime"``: the decoder with GQA if it fits.

    A family whose attention cannot become GroupQueryAttention keeps the default graph
    (onnxscript's fusions still run on it); a ``UserWarning`` says why.
    """
    if task != "text-generation" or len(specs) != 1:
        return specs
    fused = fused_causal_lm_graph(model, specs[0])
    if isinstance(fused, str):
        warnings.warn(
            f"{type(model).__name__} cannot use GroupQueryAttention under the onnxruntime "
            f"target: {fused}; the decoder keeps the default attention (with onnxscript's "
            "fusions).",
            UserWarning,
            stacklevel=3,
        )
        return specs
    return [fused]


def with_fused_ops(spec: GraphSpec, options: Any) -> Any:
    """``options`` with the registry that translates our attention op, for fused graphs."""
    if not isinstance(spec.module, FusedCausalLM):
        return options
    import onnx_export

    registry = onnx_export.OnnxRegistry()
    registry.register_op(group_query_attention, group_query_attention_onnx)
    return dataclasses.replace(options, onnx_registry=registry)


def group_query_attention_onnx(
    query: Any,
    key: Any,
    value: Any,
    past_key: Any,
    past_value: Any,
    attention_bias: Any,
    scale: float,
    softcap: float,
    window: int,
    num_heads: int,
    kv_num_heads: int,
) -> Any:
    """The custom op as ``com.microsoft.GroupQueryAttention`` (queries BSNH-packed)."""
    from onnx_export.ops._opset import opset as op

    packed = op.Constant(value_ints=[0, 0, -1])
    q = op.Reshape(op.Transpose(query, perm=[0, 2, 1, 3]), packed)
    k = op.Reshape(op.Transpose(key, perm=[0, 2, 1, 3]), packed)
    v = op.Reshape(op.Transpose(value, perm=[0, 2, 1, 3]), packed)
    total = op.Shape(attention_bias, start=3, end=4)
    last = op.Cast(op.Sub(total, op.Constant(value_ints=[1])), to=6)  # int32
    seqlens_k = op.Expand(last, op.Shape(query, end=1))
    return _gqa_op()(
        q,
        k,
        v,
        past_key,
        past_value,
        seqlens_k,
        op.Squeeze(op.Cast(total, to=6)),
        None,
        None,
        None,
        attention_bias,
        num_heads=num_heads,
        kv_num_heads=kv_num_heads,
        scale=scale,
        softcap=softcap,
        local_window_size=window - 1 if window > 0 else -1,
    )


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
