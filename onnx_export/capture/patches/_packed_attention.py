"""Vision attention over images packed in one sequence, captured as one block-diagonal attention.

transformers' vision towers of the Qwen2-VL kind (GLM-4V, ERNIE-4.5-VL, ColQwen2, EXAONE
4.5, Qwen2.5/3-VL...) put every image's (every frame's) patches in one sequence, with
``cu_seqlens`` the cumulative lengths. Unless a flash attention is configured, their
attention splits the sequence per image and attends chunk by chunk::

    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    splits = [torch.split(t, lengths.tolist(), dim=2) for t in (q, k, v)]

How many chunks there are depends on ``grid_thw``'s values (frames per video), which
torch.export cannot turn into a Python list ("Could not guard on data-dependent
expression"). The flash path of the same module hands ``cu_seqlens`` to the attention
function instead (``cu_seq_lens_q``/``cu_seq_lens_k``).

While :func:`packed_attention` is active, the configs of those modules (a module whose
``forward`` takes the flash path on ``cu_seq_lens_q`` and otherwise splits by
``.tolist()``) name an attention function of ours whose name contains "flash", so the
module takes that path. The function attends over the whole sequence with a mask that
lets each token see the tokens of its own chunk only, computed from ``cu_seqlens`` with
tensor ops (``scaled_dot_product_attention`` with that mask). Attention
restricted to a chunk is attention with the other chunks masked out: the result is the
same up to float rounding, and the export's parity check compares it with eager.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target

__all__ = ["PATCH", "packed_attention"]

#: The name of our attention function in transformers' registry ("flash" selects the path).
NAME = "onnx_export_flash_packed"


def _chunk_of_each(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """For each position ``0 .. length - 1``, the index of the chunk it is in."""
    positions = torch.arange(length, device=cu_seqlens.device)
    ends = cu_seqlens[1:].to(positions.dtype)
    return (positions[:, None] >= ends[None, :]).sum(-1)


def block_diagonal_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of each packed chunk to itself: the whole sequence with a block mask.

    ``query``, ``key``, ``value`` as transformers' attention functions take them
    (batch, heads, sequence, head size); returns (batch, sequence, heads, head size).
    """
    cu_q = kwargs.get("cu_seq_lens_q")
    cu_k = kwargs.get("cu_seq_lens_k", cu_q)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    allowed = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device)
    if cu_q is not None:
        chunk_q = _chunk_of_each(cu_q, query.shape[-2])
        chunk_k = _chunk_of_each(cu_k if cu_k is not None else cu_q, key.shape[-2])
        allowed = chunk_q[:, None] == chunk_k[None, :]
    if is_causal:
        allowed = allowed & torch.ones_like(allowed).tril()
    mask = torch.zeros((), dtype=query.dtype, device=query.device)
    mask = mask.masked_fill(~allowed, torch.finfo(query.dtype).min)[None, None]
    if attention_mask is not None:
        mask = mask + attention_mask
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return output.transpose(1, 2).contiguous(), None


#: Module classes already read: whether their ``forward`` splits packed chunks.
_SPLITS: dict[type, bool] = {}


def _splits_packed_chunks(cls: type) -> bool:
    """Whether ``cls.forward`` takes the flash path on ``cu_seqlens``, else splits by data."""
    if cls not in _SPLITS:
        try:
            source = inspect.getsource(getattr(cls, "forward"))  # noqa: B009  # any module class
        except (OSError, TypeError, AttributeError):
            source = ""
        _SPLITS[cls] = "cu_seq_lens_q" in source and ".tolist()" in source and "flash" in source
    return _SPLITS[cls]


def _configs_to_switch(model: torch.nn.Module) -> list[Any]:
    """The configs of the modules that split packed chunks (a VLM's vision config)."""
    configs: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is None or not _splits_packed_chunks(type(module)):
            continue
        if "flash" not in str(getattr(config, "_attn_implementation", None) or ""):
            configs[id(config)] = config
    return list(configs.values())


@contextlib.contextmanager
def packed_attention(model: torch.nn.Module) -> Iterator[None]:
    """Packed vision attention of ``model`` as one block-diagonal attention while active.

    Example:
        >>> with packed_attention(torch.nn.Linear(2, 2)):
        ...     pass
    """
    try:
        configs = _configs_to_switch(model)
    except Exception:  # a model whose modules cannot be listed: nothing to switch
        configs = []
    if not configs:
        yield
        return
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, block_diagonal_attention)
    for config in configs:
        config._onnx_export_packed_from = config._attn_implementation_internal
        config._attn_implementation_internal = NAME
    try:
        yield
    finally:
        for config in configs:
            config._attn_implementation_internal = config._onnx_export_packed_from
            del config._onnx_export_packed_from


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="packed_attention",
    targets=(
        Target("transformers.modeling_utils", "AttentionInterface.register"),
        Target(
            "transformers.models.qwen2_vl.modeling_qwen2_vl",
            "VisionAttention.forward",
            example=True,
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="vision towers split images packed in one sequence by cu_seqlens.tolist()",
    apply=lambda call: packed_attention(call.model),
)
