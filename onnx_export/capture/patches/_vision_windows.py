"""Windowed vision attention's token order, captured as tensor ops instead of a loop over images.

Vision towers of the Qwen2.5-VL kind attend within windows of merged patches in some
layers. transformers' ``get_vision_window_index`` (``vision_utils.py``) loops over
``grid_thw.tolist()`` and takes each image's ``(t, h, w)`` as Python numbers to list the
windows: the order of the merged patches, window after window (``window_index``), and
the cumulative window lengths (``cu_window_seqlens``, empty windows dropped). torch.export
cannot trace that ("Could not guard on data-dependent expression").

While :func:`vision_windows` is active, the modules that call that function get one that
computes, for every merged patch, its window and its place in the window order with
elementwise ops: ``window_index`` (the same permutation eager gives) and
``cu_window_seqlens`` as the end of each patch's window, sorted: the same boundaries, each
repeated once per patch of its window. A chunk of length 0 between repeats is empty;
the packed attention of capture (``_packed_attention.py``) masks by boundaries and gives
the same result. The number of merged patches is read from the caller's ``hidden_states``
(the patches the tower was given), so it stays the symbolic size of the input.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, modules_holding, swapped

__all__ = ["PATCH", "vision_windows", "window_order"]


def window_order(
    grid_thw: torch.Tensor, merge: int, window: int, merged: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``window_index`` (merged patches in window order) and sorted window ends (patches).

    ``window``: the side of a window in merged patches; ``merged``: the number of merged
    patches of all images (a symbolic size while capturing).

    Example:
        >>> order, ends = window_order(torch.tensor([[1, 2, 6]]), 1, 2, 12)
        >>> order.tolist()
        [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]
    """
    grid = grid_thw.long()
    frames, height, width = grid[:, 0], grid[:, 1] // merge, grid[:, 2] // merge
    sizes = frames * height * width
    ends = sizes.cumsum(0)
    token = torch.arange(merged, device=grid.device)
    image = (ends[None, :] <= token[:, None]).sum(-1).clamp(max=grid.shape[0] - 1)
    first, rows_of, cols_of = (ends - sizes)[image], height[image], width[image]
    area = (rows_of * cols_of).clamp(min=1)
    local = token - first
    across = cols_of.clamp(min=1)
    frame, row, col = local // area, (local % area) // across, (local % area) % across
    window_row, window_col = row // window, col // window
    rows = (rows_of - window_row * window).clamp(max=window)
    cols = (cols_of - window_col * window).clamp(max=window)
    start = first + frame * area + window_row * window * cols_of + rows * window_col * window
    place = start + (row % window) * cols + col % window
    order = torch.zeros_like(token).scatter(0, place, token)
    return order, torch.sort(start + rows * cols).values


def _window_index(original: Any) -> Any:
    """``get_vision_window_index`` with ``original``'s signature, computed with tensor ops."""

    def get_vision_window_index(
        grid_thw: torch.Tensor,
        spatial_merge_size: int,
        window_size: int,
        patch_size: int,
        kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if kwargs is not None:
            given = kwargs.pop("window_index", None), kwargs.pop("cu_window_seqlens", None)
            if given[0] is not None and given[1] is not None:
                return given
        patches = sys._getframe(1).f_locals.get("hidden_states")
        if not isinstance(patches, torch.Tensor) or patches.dim() != 2:
            return original(grid_thw, spatial_merge_size, window_size, patch_size)  # type: ignore[no-any-return]
        unit = spatial_merge_size**2
        window = window_size // spatial_merge_size // patch_size
        order, ends = window_order(grid_thw, spatial_merge_size, window, patches.shape[0] // unit)
        zero = torch.zeros(1, dtype=torch.int32, device=grid_thw.device)
        return order, torch.cat([zero, (ends * unit).to(torch.int32)])

    return get_vision_window_index


@contextlib.contextmanager
def vision_windows() -> Iterator[None]:
    """The vision window order of transformers' towers computed with tensor ops while active.

    Example:
        >>> with vision_windows():
        ...     pass
    """
    utils = sys.modules.get("transformers.vision_utils")
    original = getattr(utils, "get_vision_window_index", None)
    if original is None:
        yield
        return
    patched = _window_index(original)
    name = "get_vision_window_index"
    users = modules_holding(name, original)  # patched while capturing (under EXPORT_LOCK)
    with swapped(*((module, name, patched) for module in users)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="vision_windows",
    # absent in 5.8.0, present in 5.9.0 (both wheels read); the hf floor is 5.24
    targets=(Target("transformers.vision_utils", "get_vision_window_index", since="5.9"),),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="windowed vision attention orders its tokens in a Python loop over images",
    apply=lambda call: vision_windows(),
)
