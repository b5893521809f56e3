"""Sizes that stay symbolic through transformers' ``torch_int``.

transformers sizes relative-position tables and interpolated position embeddings with
``torch_int(x)`` (``utils/generic.py``): ``int(x)`` outside ``torch.jit`` tracing. Under
``torch.export`` a size computed from the image (``2 * (height // patch) - 1``, BEiT's
table side) is a ``SymInt``, and ``int()`` on it fixes it to the example's value: the
table is interpolated to the example's side (and folded into a constant), while the
index into it still follows the image, so a larger image reads past the table ("GatherND
... invalid index" in ONNX Runtime). While :func:`symbolic_torch_int` is active the
modules that call it get one that hands a ``SymInt`` back unchanged (an ``int`` to every
caller: ``F.interpolate`` and ``reshape`` take it) and is ``torch_int`` otherwise.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, modules_holding, swapped

__all__ = ["symbolic_torch_int"]


def _symbolic(original: Any) -> Any:
    def torch_int(x: Any) -> Any:
        if isinstance(x, torch.SymInt):
            return x
        return original(x)

    return torch_int


@contextlib.contextmanager
def symbolic_torch_int() -> Iterator[None]:
    """Keep symbolic sizes symbolic through transformers' ``torch_int`` while active.

    transformers' ``torch_int`` keeps symbolic sizes symbolic while active.

    Example:
        >>> with symbolic_torch_int():
        ...     pass
    """
    generic = sys.modules.get("transformers.utils.generic")
    original = getattr(generic, "torch_int", None)
    if original is None:
        yield
        return
    patched = _symbolic(original)
    users = modules_holding("torch_int", original)  # patched while capturing (EXPORT_LOCK)
    with swapped(*((module, "torch_int", patched) for module in users)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="torch_int",
    targets=(Target("transformers.utils.generic", "torch_int", ("x",)),),
    tested=("torch 2.13.0", "transformers 5.25"),
    why="int() on an image-derived size fixes relative-position tables to the example's image",
    apply=lambda call: symbolic_torch_int(),
)
