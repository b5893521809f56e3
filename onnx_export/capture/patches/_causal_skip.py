"""transformers' causal-mask skip answered before it compares the mask with the past and new tokens.

``masking_utils._ignore_causal_mask_sdpa`` decides whether SDPA may run without a mask.
Its first lines slice a padding mask longer than the keys::

    if padding_mask is not None and padding_mask.shape[-1] > kv_length:
        ...
    if is_torchdynamo_exporting() or (padding_mask is not None and is_tracing(padding_mask)):
        return False

Under torch.export the answer is always ``False`` and the sliced mask is never read, but
the comparison of the mask's length with the past plus the new tokens is traced: the
file then holds only where ``total <= past + seq`` and refuses a longer mask, which the
mask built next (``sdpa_mask``) serves as eagerly. While :func:`causal_skip_untraced` is
active, a traced padding mask gets transformers' own answer, ``False``, first.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "causal_skip_untraced"]


def _deciding(original: Callable[..., bool], masking: Any) -> Callable[..., bool]:
    def _ignore_causal_mask_sdpa(padding_mask: Any, *args: Any, **kwargs: Any) -> bool:
        if padding_mask is not None and masking.is_tracing(padding_mask):
            return False  # transformers' answer for a traced mask, without its slice
        return original(padding_mask, *args, **kwargs)

    return _ignore_causal_mask_sdpa


@contextlib.contextmanager
def causal_skip_untraced() -> Iterator[None]:
    """A traced padding mask is never a reason to skip the causal mask, while active.

    Only where transformers is already imported.

    Example:
        >>> with causal_skip_untraced():
        ...     pass
    """
    masking = sys.modules.get("transformers.masking_utils")
    original = getattr(masking, "_ignore_causal_mask_sdpa", None)
    if masking is None or original is None or not hasattr(masking, "is_tracing"):
        yield
        return
    with swapped((masking, "_ignore_causal_mask_sdpa", _deciding(original, masking))):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="causal_skip",
    targets=(
        Target(
            "transformers.masking_utils",
            "_ignore_causal_mask_sdpa",
            ("padding_mask", "q_length", "kv_length"),
            since="5.0",
        ),
        Target("transformers.masking_utils", "is_tracing", since="5.0"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="the skip check compares a traced mask's length with the keys it never reads",
    apply=lambda call: causal_skip_untraced(),
)
