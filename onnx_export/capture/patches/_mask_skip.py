"""transformers' bidirectional mask skipped under torch.export as it is eagerly, without a mask.

For SDPA (and the ``eager`` builder that reuses it), transformers returns no mask at all
for bidirectional attention when no token is padded (``create_bidirectional_mask``,
``masking_utils._ignore_bidirectional_mask_sdpa``). Under torch.export it never skips,
since it would have to read the padding mask's values; but when no padding mask was
given there is nothing to read, and the export builds an all-true mask that eager never
sees. Models whose attention treats a mask differently from none then trace another path
than eager: Autoformer's auto-correlation views its weights ``(bsz * heads, tgt_len,
head_dim)`` as ``(bsz, heads, tgt_len, src_len)`` only when a mask is given, which holds
for no input of its tester ("shape '[13, 4, 14, 14]' is invalid for input of size 2912").

While :func:`bidirectional_skip_without_padding` is active, the skip is decided as
eagerly when there is no padding mask and no local attention window (both known while
tracing, so no value is read): no mask, as eager. Every other case goes to transformers'
function unchanged.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "bidirectional_skip_without_padding"]


def _deciding(original: Callable[..., bool]) -> Callable[..., bool]:
    def _ignore_bidirectional_mask_sdpa(padding_mask: Any, *args: Any, **kwargs: Any) -> bool:
        # (padding_mask, kv_length, local_attention_size=None) in 5.25; (padding_mask) in 5.0
        local = kwargs.get("local_attention_size", args[1] if len(args) > 1 else None)
        if padding_mask is None and local is None:
            return True  # eager's answer, whatever the lengths
        return original(padding_mask, *args, **kwargs)

    return _ignore_bidirectional_mask_sdpa


@contextlib.contextmanager
def bidirectional_skip_without_padding() -> Iterator[None]:
    """A bidirectional mask without padding is skipped as eagerly, while active.

    Only where transformers is already imported.

    Example:
        >>> with bidirectional_skip_without_padding():
        ...     pass
    """
    masking = sys.modules.get("transformers.masking_utils")
    original = getattr(masking, "_ignore_bidirectional_mask_sdpa", None)
    if masking is None or original is None:
        yield
        return
    with swapped((masking, "_ignore_bidirectional_mask_sdpa", _deciding(original))):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="mask_skip",
    targets=(
        Target(
            "transformers.masking_utils",
            "_ignore_bidirectional_mask_sdpa",
            ("padding_mask",),
            since="5.0",
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="transformers skips a bidirectional mask without padding eagerly, never under torch.export",
    apply=lambda call: bidirectional_skip_without_padding(),
)
