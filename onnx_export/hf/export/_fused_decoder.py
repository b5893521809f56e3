"""The decoder graph for ``target="onnxruntime"``: one ``GroupQueryAttention`` per layer.

Instead of finding attention again in the traced graph (a pattern that each family and
each transformers release draws differently), the model is exported with an attention
implementation of our own (transformers' ``AttentionInterface``): every layer's attention
call becomes one ``onnx_export_hf::group_query_attention`` custom op (``hf/export/_gqa.py``),
translated to ``com.microsoft.GroupQueryAttention``. The family's projections and q/k
norms stay as transformers wrote them; the cache concat, the repeat of the key/value
heads, the masks, the softmax and (when the family applies the standard rotary
embedding through its module's ``apply_rotary_pos_emb``) the rotary embedding, from
cos/sin caches stored as initializers, are inside the one op.

Inputs and outputs have the default target's names and shapes: ``input_ids``,
``attention_mask`` (batch, total length), ``position_ids``, ``past_key_values.{i}.key`` /
``.value`` (batch, kv heads, past length, head size: GQA's BNSH layout); outputs ``logits``
and ``present.{i}.key`` / ``.value``. Rows of different lengths follow GQA's convention
(onnxruntime-genai's), not transformers' left padding: each row's tokens come first and
``attention_mask`` counts them (``seqlens_k`` is the count - 1; no attention bias); the
graph is marked ``onnx_export.padding_side = "right"`` and the runtime right-aligns a
left-padded batch (``hf/runtime/generation/_causal.py``). With the rotary inside GQA,
``position_ids`` goes unused: GQA rotates at each token's position in its row
(see ``hf/export/_gqa.py``).
``logits`` holds each row's last token (transformers' ``logits_to_keep=1``, per row):
(batch, 1, vocab); fed ``num_logits_to_keep`` = k (an input with a default of 1 that
``passes/ort_gqa.py`` adds to the head's ``GatherND``), each row's last k: the drafts
speculative decoding verifies in a step of several new tokens after a past (ORT's CPU
kernel takes those for batch 1 only).
GQA reads and writes the cache at ``seqlens_k`` only, and nothing else reads the pasts, so
the runtime may bind each past and its present to one preallocated max-length buffer that
GQA updates in place (``passes/ort_gqa.py`` marks the graph,
``hf/runtime/generation/_shared_cache.py`` runs it); the graph is the same either way.

Before it is used, the fused wrapper is run eagerly beside the default one on a padded
prompt and on a step with a past: a family where the substitution changes the result
(another rotary flavour, an attention argument GQA lacks) keeps the default graph, with
a ``UserWarning``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from onnx_export.capture._user_code import warn_at_user_line
from onnx_export.hf.export._gqa import (
    group_query_attention,
    group_query_attention_onnx,
    last_token_rows,
    last_token_rows_onnx,
)
from onnx_export.hf.export._parity import tolerance
from onnx_export.hf.export.graphs._base import GraphSpec

__all__ = [
    "ATTENTION_NAME",
    "FusedCausalLM",
    "FusedGraphSpec",
    "fused_causal_lm_graph",
    "onnxruntime_graphs",
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
#: Rotary types whose cos/sin depend on the position only (a cache holds them).
_STATIC_ROPE = {"default", "linear", "llama3", "yarn", None}


class _NotFusable(Exception):
    """The model's attention cannot be replaced by GroupQueryAttention."""


@dataclasses.dataclass
class _Step:
    """What one forward's attention calls share: inputs of the step; the presents."""

    past: list[dict[str, torch.Tensor]]
    mask: torch.Tensor
    rotary: tuple[torch.Tensor, torch.Tensor] | None
    presents: dict[int, tuple[torch.Tensor, torch.Tensor]] = dataclasses.field(default_factory=dict)
    deferred: int = 0


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
    scale, softcap = kwargs.get("scaling"), kwargs.get("softcap")
    rotary = step.rotary if step.deferred else None
    cos, sin = rotary or (query.new_zeros(0, 0), query.new_zeros(0, 0))
    out, present_key, present_value = group_query_attention(
        query,
        key,
        value,
        past["key"],
        past["value"],
        step.mask,
        cos,
        sin,
        1 if rotary else 0,
        float(query.shape[-1] ** -0.5 if scale is None else scale),
        float(softcap or 0.0),
        int(kwargs.get("sliding_window") or 0),
    )
    step.presents[layer] = (present_key, present_value)
    return out.reshape(out.shape[0], out.shape[1], query.shape[1], -1), None


def _deferred_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *args: Any, **kw: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stands in for ``apply_rotary_pos_emb``: GQA rotates (``do_rotary=1``)."""
    _CURRENT[-1].deferred += 1
    return q, k


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """No mask: GQA masks each row after its count of tokens (``attention_mask``'s sum)."""
    return None


def _keep_new(
    key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``DynamicCache.update`` that keeps the cache as it was and returns the new tokens."""
    return key, value


@contextlib.contextmanager
def _attention_set(model: Any, rotary: bool) -> Iterator[None]:
    """``model`` uses our attention (and our rotary) inside the block, its own after it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, _attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_mask)
    before = model.config._attn_implementation
    patched = _rotary_modules(model) if rotary else []
    originals = [m.apply_rotary_pos_emb for m in patched]
    model.set_attn_implementation(ATTENTION_NAME)
    for module in patched:
        module.apply_rotary_pos_emb = _deferred_rotary
    try:
        yield
    finally:
        for module, original in zip(patched, originals, strict=True):
            module.apply_rotary_pos_emb = original
        model.set_attn_implementation(before)


class _LastTokenHead(nn.Module):
    """The output head, applied to each row's last token only (``last_token_rows``)."""

    def __init__(self, head: nn.Module, mask: torch.Tensor) -> None:
        super().__init__()
        self.head, self.mask = head, mask

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(last_token_rows(hidden, self.mask))  # type: ignore[no-any-return]


@contextlib.contextmanager
def _last_tokens(model: nn.Module, mask: torch.Tensor) -> Iterator[None]:
    """Inside the block, ``model``'s output head sees each row's last token only."""
    head = model.get_output_embeddings()  # type: ignore[operator]
    places = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if child is head
    ]
    if len(places) != 1:
        raise _NotFusable("its output head is not one module of the model")
    parent, name = places[0]
    setattr(parent, name, _LastTokenHead(head, mask))
    try:
        yield
    finally:
        setattr(parent, name, head)


def _rotary_modules(model: nn.Module) -> list[Any]:
    """The Python modules of ``model``'s layers that define ``apply_rotary_pos_emb``."""
    names = {type(m).__module__ for m in model.modules()}
    found = [sys.modules[n] for n in sorted(names) if n in sys.modules]
    return [m for m in found if callable(getattr(m, "apply_rotary_pos_emb", None))]


def _rotary_caches(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """cos/sin caches (positions, rotary / 2) from the model's one rotary module, if static."""
    rotary = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    config = getattr(model, "config", None)
    limit = int(getattr(config, "max_position_embeddings", 0) or 0)
    if len(rotary) != 1 or not limit or not _rotary_modules(model):
        return None
    module = rotary[0]
    if getattr(module, "rope_type", None) not in _STATIC_ROPE:
        return None
    positions = torch.arange(limit).unsqueeze(0)
    try:
        with torch.no_grad():
            cos, sin = module(torch.zeros(1, dtype=torch.float32), position_ids=positions)
    except (TypeError, RuntimeError, ValueError):
        return None
    half = cos.shape[-1] // 2
    if cos.dim() != 3 or not torch.equal(cos[..., :half], cos[..., half:]):
        return None  # not the halves layout GQA's (non-interleaved) rotary takes
    return cos[0, :, :half].contiguous(), sin[0, :, :half].contiguous()


class FusedCausalLM(nn.Module):
    """A causal LM whose attention is GroupQueryAttention; same inputs and outputs as default.

    Each call switches the model to our attention implementation and back, so the
    wrapped model is left as it was (eager checks and the export both go through here).
    """

    def __init__(self, model: nn.Module, rotary: bool = True) -> None:
        super().__init__()
        from onnx_export.hf.export.graphs._base import cache_keyword

        self.model = model
        self.cache_keyword = cache_keyword(model)
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        caches = _rotary_caches(model) if rotary else None
        self.rotary = caches is not None
        if caches is not None:  # in the weights' dtype, as transformers' rotary returns them
            dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
            self.register_buffer("cos_cache", caches[0].to(dtype), persistent=False)
            self.register_buffer("sin_cache", caches[1].to(dtype), persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One step: the prompt (past length 0) or the next tokens."""
        from onnx_export.hf.export.graphs._base import dynamic_cache

        cache = dynamic_cache(past_key_values)
        cache.update = _keep_new  # GQA appends to the cache itself
        rotary = None
        if self.rotary:
            rotary = (self.get_buffer("cos_cache"), self.get_buffer("sin_cache"))
        step = _Step(past_key_values, attention_mask, rotary)
        # all positions reach the head, which keeps each row's last token (its own module)
        extra = {"logits_to_keep": 0} if self.keeps_logits else {}
        _CURRENT.append(step)
        try:
            with _attention_set(self.model, self.rotary), _last_tokens(self.model, attention_mask):
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
        if self.rotary and step.deferred != layers:
            raise _NotFusable(f"{step.deferred} of {layers} layers applied the rotary function")
        logits = out.logits  # (batch, 1, vocab): each row's last token
        presents = [{"key": k, "value": v} for k, v in (step.presents[i] for i in range(layers))]
        return {"logits": logits, "present": presents}


@dataclasses.dataclass(frozen=True)
class FusedGraphSpec(GraphSpec):
    """A fused decoder's spec; checked against eager on ``check_args``, a prompt.

    ORT's CPU GroupQueryAttention takes several new tokens on top of a past for batch 1
    only, so the export's example inputs (batch 2, 3 tokens after 4) are not run; the
    check runs a left-padded batch-2 prompt (past length 0) instead.
    """

    check_args: tuple[Any, ...] = ()


def _prompt_args(args: tuple[Any, ...], vocab: int, padded: bool) -> tuple[Any, ...]:
    ids, _, _, past = args
    batch, length = ids.shape[0], ids.shape[1] + 1
    prompt = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, length, dtype=torch.long)
    if padded:  # the last row left-padded by 2
        mask[-1, :2] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    empty = [{n: t[:, :, :0] for n, t in layer.items()} for layer in past]
    return prompt, mask, positions, empty


def _right_aligned_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A prompt's ``(ids, mask, positions, past)`` with each row's tokens moved first.

    transformers pads on the left; the fused graph takes GQA's rows: tokens first, the
    mask counting them (padding after them, its id and position 0).
    """
    ids, mask, positions, past = args
    keep = mask.bool()
    if bool(keep.all()):  # nothing to move (a step after a past has no padding here)
        return args
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)  # tokens first
    counts = keep.sum(dim=1, keepdim=True)
    real = torch.arange(ids.shape[1])[None, :] < counts
    ids = torch.where(real, ids.gather(1, order), 0)
    positions = torch.where(real, positions.gather(1, order), 0)
    return ids, real.to(mask.dtype), positions, past


def _differences(fused: nn.Module, default: nn.Module, args: tuple[Any, ...]) -> list[str]:
    """Where ``fused`` (on GQA's rows) and ``default`` disagree on ``args``' real tokens."""
    compact = _right_aligned_args(args)
    with torch.no_grad():
        want, got = default(*args), fused(*compact)
    mask, compact_mask = args[1].bool(), compact[1].bool()
    pairs = [("logits", want["logits"][:, -1:], got["logits"])]
    for i, (a, b) in enumerate(zip(want["present"], got["present"], strict=True)):
        # (batch, heads, total, size): the real tokens only, in each row's order
        pairs += [
            (f"present.{i}.{n}", a[n].transpose(1, 2)[mask], b[n].transpose(1, 2)[compact_mask])
            for n in ("key", "value")
        ]
    rtol, atol = tolerance(str(want["logits"].dtype).removeprefix("torch."))
    return [
        name
        for name, a, b in pairs
        if a.shape != b.shape or not torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol)
    ]


def fused_causal_lm_graph(model: Any, spec: GraphSpec) -> GraphSpec | str:
    """``spec`` with :class:`FusedCausalLM` as its module, or why it cannot have it.

    The fused wrapper (with GQA's rotary, else without) must give the default wrapper's
    last logits and presents on a padded prompt and on the export's step with a past.
    """
    if not getattr(model, "_supports_attention_backend", False):
        return "its attention does not go through transformers' attention interface"
    past = spec.args[3]
    head_size = int(past[0]["key"].shape[-1]) if past else 0
    if head_size % 8:
        return f"its head size {head_size} is not a multiple of 8 (ORT's CPU kernel needs it)"
    config = model.config
    # With softcapping, ORT's values at padded positions (never read) are not ours.
    padded = not getattr(config, "attn_logit_softcapping", None)
    prompt = _prompt_args(spec.args, int(getattr(config, "vocab_size", 50) or 50), padded)
    why = ""
    # ORT rotates inside GQA for head sizes that are multiples of 16 only.
    for rotary in (True, False) if head_size % 16 == 0 else (False,):
        module = FusedCausalLM(model, rotary=rotary)
        try:
            wrong = _differences(module, spec.module, prompt)
            wrong += _differences(module, spec.module, spec.args)
        except _NotFusable as e:
            why = str(e)
            continue
        if not wrong:
            fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
            return FusedGraphSpec(
                **{**fields, "module": module}, check_args=_right_aligned_args(prompt)
            )
        why = f"with GroupQueryAttention {', '.join(wrong[:3])} differ from transformers'"
    return why


def onnxruntime_graphs(model: Any, task: str, specs: list[GraphSpec]) -> list[GraphSpec]:
    """The graphs to export for ``target="onnxruntime"``: the decoder with GQA if it fits.

    A family whose attention cannot become GroupQueryAttention keeps the default graph
    (onnxscript's fusions still run on it); a ``UserWarning`` says why.
    """
    if task != "text-generation" or len(specs) != 1:
        return specs
    fused = fused_causal_lm_graph(model, specs[0])
    if isinstance(fused, str):
        warn_at_user_line(
            f"{type(model).__name__} cannot use GroupQueryAttention under the onnxruntime "
            f"target: {fused}; the decoder keeps the default attention (with onnxscript's "
            "fusions).",
            UserWarning,
        )
        return specs
    return [fused]


def with_fused_ops(spec: GraphSpec, options: Any) -> Any:
    """``options`` with the registry that translates our attention op, for fused graphs."""
    if not any(isinstance(m, FusedCausalLM) for m in spec.module.modules()):  # LoRA wraps it
        return options
    import onnx_export

    registry = onnx_export.OnnxRegistry()
    registry.register_op(group_query_attention, group_query_attention_onnx)
    registry.register_op(last_token_rows, last_token_rows_onnx)
    return dataclasses.replace(options, onnx_registry=registry)
