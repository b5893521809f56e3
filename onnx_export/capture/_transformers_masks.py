"""transformers' attention masks built by indexing, not ``torch.vmap``, while capturing.

transformers builds a mask that carries an extra pattern (Gemma 3's and Gemma 4's
bidirectional image blocks, sliding-window overlays: ``or_mask_function`` /
``and_mask_function``) with ``torch.vmap``, which torch.export leaves as functorch ops
(``_add_batch_dim``, ``_vmap_increment_nesting``...) that no ONNX function has. Its mask
builders also have a broadcasting path (``use_vmap=False``, their default for plain
masks): the patterns transformers adds index tensors with the broadcast positions, so that
path builds the same mask. While :func:`masks_without_vmap` is active, the ``sdpa`` and
``eager`` builders are asked for it. Only where transformers is already imported; the
export's default parity check compares the result with eager.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["masks_without_vmap"]


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
    try:
        yield
    finally:
        mapping.clear()
        mapping.update(originals)
