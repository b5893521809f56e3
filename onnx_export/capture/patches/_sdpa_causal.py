"""transformers' SDPA attention on a query whose length is data-dependent.

transformers' ``sdpa_attention_forward`` decides whether SDPA applies its own causal mask::

    is_causal = q_length > 1 and attention_mask is None and is_causal

``q_length > 1`` is evaluated first. When the query length is an unbacked size (computed
from a tensor's values: Pixtral's patches of the image sizes in Mistral3, Mimi's audio
frames after padding computed from the input), torch.export cannot turn that comparison
into a Python bool ("Could not guard on data-dependent expression"), though the result
does not depend on it whenever a mask is given or the attention is not causal: the
expression is ``False`` for every length.

While :func:`sdpa_causal_flag` is active, transformers' ``"sdpa"`` attention is a function
of ours: when the query length is unbacked, undecided by what torch.export knows, and the
decision is ``False`` whatever it is, it runs what transformers' function runs with
``is_causal=False`` (key/value heads repeated for grouped queries, the position bias folded
into the mask, the attention, the output transposed). The attention is written out
(scores, softmax, weighted sum): the fused ``scaled_dot_product_attention`` asks, in C++,
whether the unbacked length is 0, which torch.export cannot answer either. Every other call,
including an unmasked causal attention whose decision does depend on the length, goes to
transformers' function unchanged (and fails as before, at that line).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, statically_known_true

from onnx_export.capture.patches._registry import Patch, Target

__all__ = ["PATCH", "sdpa_causal_flag"]

#: The parameters of transformers' ``sdpa_attention_forward`` this module passes by position.
_SDPA_PARAMETERS = (
    "module", "query", "key", "value", "attention_mask", "dropout", "scaling", "is_causal",
)  # fmt: skip


def _length_undecided(length: Any) -> bool:
    """Whether ``length > 1`` is a data-dependent question torch.export cannot answer."""
    if not isinstance(length, torch.SymInt) or not free_unbacked_symbols(length):
        return False
    return not (statically_known_true(length > 1) or statically_known_true(length <= 1))


def _attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    scale: float | None,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` (not causal) written out in tensor ops.

    The fused op itself asks whether an unbacked length is 0 (in C++, so it cannot be
    answered by us); these ops do not. Rows whose every key is masked out give 0, as
    the fused op's do.
    """
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    weights = scores.softmax(-1, dtype=torch.float32)
    weights = weights.masked_fill((scores == float("-inf")).all(-1, keepdim=True), 0.0)
    weights = torch.nn.functional.dropout(weights, dropout, training=dropout > 0)
    return torch.matmul(weights.to(value.dtype), value)


def _not_causal_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    scaling: float | None,
    position_bias: torch.Tensor | None,
) -> tuple[torch.Tensor, None]:
    """The SDPA attention of transformers with ``is_causal=False``, not asking the query length."""
    from transformers.integrations import sdpa_attention

    groups = getattr(module, "num_key_value_groups", 1)
    if isinstance(groups, int) and groups > 1:
        key = sdpa_attention.repeat_kv(key, groups)
        value = sdpa_attention.repeat_kv(value, groups)
    if position_bias is not None:
        attention_mask = sdpa_attention.create_position_bias_mask(
            position_bias, attention_mask, False, query, key
        )
    output = _attend(query, key, value, attention_mask, dropout, scaling)
    output = output.reshape(output.shape[0], -1, query.shape[2], value.shape[-1])
    return output.transpose(1, 2).contiguous(), None


def _deciding(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (transformers' SDPA), not asking an unbacked length it does not need."""

    def sdpa_attention_forward(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        dropout: float = 0.0,
        scaling: float | None = None,
        is_causal: bool | None = None,
        position_bias: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        independent = attention_mask is not None or not causal
        special = kwargs.get("softcap") is not None or kwargs.get("output_attentions", False)
        if independent and not special and _length_undecided(query.shape[2]):
            return _not_causal_attention(
                module, query, key, value, attention_mask, dropout, scaling, position_bias
            )
        if position_bias is not None:  # by name: transformers 4.57's function has no such parameter
            kwargs["position_bias"] = position_bias
        return original(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )

    return sdpa_attention_forward


@contextlib.contextmanager
def sdpa_causal_flag() -> Iterator[None]:
    """The ``"sdpa"`` attention decides ``is_causal`` without needless unbacked lengths.

    Example:
        >>> with sdpa_causal_flag():
        ...     pass
    """
    try:
        from transformers import AttentionInterface
    except Exception:  # no transformers (or a broken one): nothing to switch
        yield
        return
    mapping = AttentionInterface._global_mapping
    original = mapping.get("sdpa")
    if original is None:
        yield
        return
    mapping["sdpa"] = _deciding(original)  # type: ignore[arg-type]  # untyped registry
    try:
        yield
    finally:
        mapping["sdpa"] = original


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="sdpa_causal",
    targets=(
        Target("transformers.modeling_utils", "AttentionInterface._global_mapping"),
        Target(
            "transformers.integrations.sdpa_attention", "sdpa_attention_forward", _SDPA_PARAMETERS
        ),
        Target("transformers.integrations.sdpa_attention", "repeat_kv"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="SDPA's is_causal decision asks q_length > 1 of an unbacked length",
    apply=lambda call: sdpa_causal_flag(),
)
