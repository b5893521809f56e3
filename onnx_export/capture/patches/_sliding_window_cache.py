"""transformers' sliding-window cache layer with its window arithmetic as branches, not ``max``.

``DynamicSlidingWindowLayer`` (Mistral's, Gemma 2's, Qwen 2's ``sliding_window``) keeps
the last ``window - 1`` positions and sizes the mask from the tokens it has seen::

    self.keys = full_key_states[:, :, -self.sliding_window + 1 :, :]
    ...
    kv_offset = max(self.cumulative_length - self.sliding_window + 1, 0)

Traced with a dynamic past, the slice's length is ``Max(0, n - Max(0, n - (window - 1)))``
and the offset ``Max(0, past - window + 1)``; torch's non-strict tracing carries them
unsimplified into later sizes, where it fails (``KeyError: Max(0, Max(0, s31 - ...``),
or records the comparisons it branches on as guards over nested ``Max`` that the file's
conditions cannot state: a mask shorter than the past plus the new tokens then fails in
ONNX Runtime instead of being refused. While :func:`window_as_branches` is active, the
layer takes the same decisions as ``if`` branches over the sizes (``past + seq >
window - 1``, ``past >= window``): the same tensors as eagerly, and comparisons the
export keeps as conditions of the file (``past + seq < window``), which refuses
calls past the window with an ``InputShapeError``. A layer that records its past
(``activate_past_recording``) and a window under 2 go to transformers' code unchanged.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "window_as_branches"]


def _update(original: Callable[..., Any]) -> Callable[..., Any]:
    def update(self: Any, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        held = self.sliding_window - 1  # the positions kept for the next call
        if self.record_past or held < 1:
            return original(self, key_states, value_states, *args, **kwargs)
        import torch

        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        past = self.keys.shape[-2] if self.keys.dim() == key_states.dim() else 0
        full_keys = torch.cat([self.keys, key_states], dim=-2)
        full_values = torch.cat([self.values, value_states], dim=-2)
        self.keys, self.values = _last(full_keys, held, past), _last(full_values, held, past)
        return full_keys, full_values

    return update


def _last(states: Any, held: int, past: Any) -> Any:
    """The last ``held`` positions of ``states``: a branch on its length, where the slice was a Max.

    Keys and values are compared each on their own, as transformers slices each: their
    lengths are separate sizes to torch, and each gets the comparison that bounds it. On
    the slicing branch the past is bounded by what a cache holds (``window - 1``): a
    longer one is no cache the layer made, and the file refuses it.
    """
    import torch

    length = states.shape[-2]
    if length > held:
        torch._check(past <= held)  # type: ignore[no-untyped-call]  # torch's is untyped
        return states[:, :, length - held :, :]
    return states


def _get_mask_sizes(self: Any, query_length: Any) -> tuple[Any, Any]:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    seen, window = self.cumulative_length, self.sliding_window
    # A cache rebuilt from its tensors has seen as many tokens as it holds, at most
    # window - 1: never full under capture. Asked without a guard, so the past gets no
    # bound of its own beside ``past + seq < window`` (the update's comparison).
    if statically_known_true(seen >= window):  # full: transformers' max(...) is positive
        return window - 1 + query_length, seen - window + 1
    return seen + query_length, 0


@contextlib.contextmanager
def window_as_branches() -> Iterator[None]:
    """``DynamicSlidingWindowLayer.update``/``get_mask_sizes`` with branches, while active.

    Only where transformers is already imported.

    Example:
        >>> with window_as_branches():
        ...     pass
    """
    cache_utils = sys.modules.get("transformers.cache_utils")
    layer = getattr(cache_utils, "DynamicSlidingWindowLayer", None)
    if layer is None:
        yield
        return
    replacements = (
        (layer, "update", _update(layer.update)),
        (layer, "get_mask_sizes", _get_mask_sizes),
    )
    with swapped(*replacements):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="sliding_window_cache",
    targets=(
        Target(
            "transformers.cache_utils",
            "DynamicSlidingWindowLayer.update",
            ("key_states", "value_states"),
            since="5.0",
        ),
        Target(
            "transformers.cache_utils",
            "DynamicSlidingWindowLayer.get_mask_sizes",
            ("query_length",),
            since="5.0",
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="a sliding window's slice and mask offset trace as nested Max sizes torch cannot use",
    apply=lambda call: window_as_branches(),
)
