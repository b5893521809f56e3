"""transformers' attention masks built by indexing, not ``torch.vmap``, while capturing.

transformers builds a mask that carries an extra pattern (Gemma 3's and Gemma 4's
bidirectional image blocks, sliding-window overlays: ``or_mask_function`` /
``and_mask_function``) with ``torch.vmap``, which torch.export leaves as functorch ops
(``_add_batch_dim``, ``_vmap_increment_nesting``...) that no ONNX function has. Its mask
builders also have a broadcasting path (``use_vmap=False``, their default for plain
masks): the patterns transformers adds index tensors with the broadcast positions, so that
path builds the same mask. While :func:`masks_without_vmap` is active, the ``sdpa`` and
``eager`` builders are asked for it. transformers 4.x's builders have no such switch: they
always expand the mask function with ``_vmap_for_bhqkv``, which is then replaced by the same
expansion written with broadcast index tensors. Only where transformers is already imported; the
export's default parity check compares the result with eager.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from onnx_export.capture.patches._registry import Patch, Target

__all__ = ["PATCH", "masks_without_vmap"]


@contextlib.contextmanager
def masks_without_vmap() -> Iterator[None]:
    """Transformers' ``sdpa``/``eager`` mask builders called with ``use_vmap=False``.

    Example:
        >>> with masks_without_vmap():
        ...     pass
    """
    masking = sys.modules.get("transformers.masking_utils")
    interface = getattr(masking, "AttentionMaskInterface", None)
    mapping = getattr(interface, "_global_mapping", None)
    if not isinstance(mapping, dict):
        yield
        return
    originals = dict(mapping)

    def indexed(original: Any) -> Any:
        def build(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **{**kwargs, "use_vmap": False})

        return build

    for name in ("sdpa", "eager"):
        if name in mapping:
            mapping[name] = indexed(mapping[name])
    expansion = getattr(masking, "_vmap_for_bhqkv", None)  # transformers 4.x only
    if expansion is not None:
        masking._vmap_for_bhqkv = _broadcast_for_bhqkv  # type: ignore[union-attr]
    try:
        yield
    finally:
        mapping.clear()
        mapping.update(originals)
        if expansion is not None:
            masking._vmap_for_bhqkv = expansion  # type: ignore[union-attr]


def _broadcast_for_bhqkv(mask_function: Any, bh_indices: bool = True) -> Any:
    """Transformers 4.x's ``_vmap_for_bhqkv``: the mask function on broadcast indices, not vmap.

    Example:
        >>> import torch
        >>> causal = lambda b, h, q, kv: kv <= q
        >>> build = _broadcast_for_bhqkv(causal)
        >>> build(torch.arange(2), torch.arange(1), torch.arange(3), torch.arange(3)).shape
        torch.Size([2, 1, 3, 3])
    """
    import torch

    def build(batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
        if not bh_indices:
            mask = mask_function(batch_idx, head_idx, q_idx[:, None], kv_idx[None, :])
            pair = (q_idx.shape[0], kv_idx.shape[0])
            return torch.as_tensor(mask, device=q_idx.device).expand(*pair)
        mask = mask_function(
            batch_idx[:, None, None, None],
            head_idx[None, :, None, None],
            q_idx[None, None, :, None],
            kv_idx[None, None, None, :],
        )
        # sizes, not len(): len() makes a traced size a Python int (a static dimension)
        sizes = (batch_idx.shape[0], head_idx.shape[0], q_idx.shape[0], kv_idx.shape[0])
        return torch.as_tensor(mask, device=q_idx.device).expand(*sizes)

    return build


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="transformers_masks",
    targets=(
        Target("transformers.masking_utils", "AttentionMaskInterface._global_mapping"),
        Target("transformers.masking_utils", "sdpa_mask", ("use_vmap",), since="5.0"),
        Target("transformers.masking_utils", "eager_mask", ("use_vmap",), since="5.0"),
        Target(
            "transformers.masking_utils",
            "_vmap_for_bhqkv",
            ("mask_function", "bh_indices"),
            before="5.0",
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 4.57.6", "transformers 5.25"),
    why="masks with extra patterns are built with torch.vmap, whose functorch ops ONNX lacks",
    apply=lambda call: masks_without_vmap(),
)
