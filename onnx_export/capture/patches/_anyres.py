"""Any-resolution image grids (LLaVA-NeXT's ``image_sizes``) computed with tensor ops.

LLaVA-NeXT, LLaVA-NeXT-Video, LLaVA-OneVision and Granite-4-Vision tile each image into a
grid of crops chosen from the config's ``image_grid_pinpoints`` by the image's original
size, an input tensor (``image_sizes``). transformers' helpers read that tensor in Python
(``image_size.tolist()``) and compute the grid with Python numbers:

- ``image_size_to_num_patches``: how many crops the image has (``select_best_resolution``
  picks the pinpoint that keeps most of the image and wastes least);
- ``get_anyres_image_grid_shape``: the same pinpoint, as crops along height and width;
- ``unpad_image``: the crop grid's features without the padding that kept the image's
  aspect ratio.

Under torch.export the values are unknown, and ``select_best_resolution`` stops at its
first comparison ("Could not guard on data-dependent expression").

While :func:`anyres_tensor_sizes` is active, those helpers (found by name in the loaded
``transformers.models`` modules) compute the same numbers with tensor ops when the size
is a tensor: every pinpoint's effective and wasted resolution at once, the first best by
``argmax``; the unpadding's both branches, selected with ``torch.where``. The counts come
back to Python with ``.item()``: unbacked sizes, bounded by the pinpoints, so the number
of image features follows ``image_sizes`` in the exported program as it does eagerly.
Where every pinpoint gives the same count, it is a plain int. One image's crop grid is
read once and shared by both helpers (they are called on ``image_sizes[i]`` twice), so
that the features' ``view`` to that grid is known to fit; the unpadded grid's rows and
columns are counts of their own, bounded by the grid's largest side.

A size given as a list, tuple or array goes to transformers' helper unchanged. Known
differences: an image so thin that every pinpoint keeps none of its pixels makes
transformers fail (no pinpoint is chosen), where the graph takes the first pinpoint; and
Python's ``round(x, 7)`` in ``unpad_image`` is taken as ``round(x * 1e7)`` in float64,
which can differ only within about 1e-9 of a half at the 7th decimal.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._sympy.value_ranges import bound_sympy

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "anyres_tensor_sizes", "best_resolution", "unpadded", "crop_grid"]

#: transformers' helpers replaced while active, by name.
_HELPERS = ("image_size_to_num_patches", "get_anyres_image_grid_shape", "unpad_image")


def _check(condition: Any, message: str) -> None:
    """``torch._check``: a runtime assert in the program where ``condition`` is symbolic."""
    torch._check(condition, lambda: message)  # type: ignore[no-untyped-call]  # no stubs


def best_resolution(size: torch.Tensor, pinpoints: Sequence[Sequence[int]]) -> torch.Tensor:
    """``select_best_resolution`` in tensor ops: the chosen ``(height, width)`` pinpoint.

    The pinpoint with the largest effective resolution, then the least waste, the first of
    equals, as transformers' loop picks it.

    Example:
        >>> best_resolution(torch.tensor([30, 60]), [[32, 32], [32, 64]]).tolist()
        [32, 64]
    """
    table = torch.tensor([list(p) for p in pinpoints], dtype=torch.int64, device=size.device)
    heights, widths = table[:, 0], table[:, 1]
    original = size.to(torch.int64)
    high, wide = original[0], original[1]
    real_high, real_wide = high.double(), wide.double()  # Python's true division: float64
    scale = torch.minimum(widths.double() / real_wide, heights.double() / real_high)
    scaled = torch.trunc(real_wide * scale).long() * torch.trunc(real_high * scale).long()
    effective = torch.minimum(scaled, wide * high)
    wasted = heights * widths - effective
    span = max(p[0] * p[1] for p in pinpoints) + 1  # 0 <= wasted < span: a lexicographic key
    return table[torch.argmax(effective * span - wasted)]


def _count(value: torch.Tensor, low: int, high: int) -> int | torch.SymInt:
    """``value.item()`` with its known bounds, so that torch.export can reason about it."""
    if low == high:
        return low
    count = value.item()
    _check(count >= low, f"expected a count of at least {low}")
    _check(count <= high, f"expected a count of at most {high}")
    return count  # type: ignore[return-value]  # an int or an unbacked SymInt


def crop_grid(
    size: torch.Tensor, pinpoints: Sequence[Sequence[int]], patch: int, ceil: bool
) -> tuple[int | torch.SymInt, int | torch.SymInt]:
    """The chosen pinpoint in crops of ``patch`` pixels along height and width.

    ``ceil``: crops that cover the pinpoint (``image_size_to_num_patches`` counts them);
    otherwise whole crops (``get_anyres_image_grid_shape``).

    Example:
        >>> crop_grid(torch.tensor([30, 60]), [[32, 32], [32, 64]], 16, ceil=False)
        (2, 4)
    """
    chosen = best_resolution(size, pinpoints)
    counts = []
    for axis in (0, 1):
        values = [p[axis] for p in pinpoints]
        per = [-(-v // patch) if ceil else v // patch for v in values]
        total = (chosen[axis] + (patch - 1 if ceil else 0)) // patch
        counts.append(_count(total, min(per), max(per)))
    return counts[0], counts[1]


def _as_float(value: int | torch.SymInt, like: torch.Tensor) -> torch.Tensor:
    one = torch.ones((), dtype=torch.float64, device=like.device)
    return one * value  # type: ignore[return-value]  # stubs: Tensor * SymInt is a Tensor


def unpadded(features: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """``unpad_image`` in tensor ops: the rows or columns of padding cut off both sides.

    Example:
        >>> unpadded(torch.ones(1, 4, 4), torch.tensor([10, 20])).shape
        torch.Size([1, 2, 4])
    """
    original = size.to(torch.float64)
    high, wide = original[0], original[1]
    rows, cols = features.shape[1], features.shape[2]
    current_high, current_wide = _as_float(rows, features), _as_float(cols, features)
    rows_now, cols_now = current_high.long(), current_wide.long()
    by_width = wide / high > current_wide / current_high
    # int(round(x, 7)): rounded at the 7th decimal, then truncated.
    new_high = torch.floor(torch.round(high * (current_wide / wide) * 1e7) / 1e7).long()
    new_wide = torch.floor(torch.round(wide * (current_high / high) * 1e7) / 1e7).long()
    zero = torch.zeros((), dtype=torch.int64, device=features.device)
    pad_rows = torch.where(by_width, (rows_now - new_high) // 2, zero)
    pad_cols = torch.where(by_width, zero, (cols_now - new_wide) // 2)
    # The kept rows and columns are counts of their own, bounded by the grid's largest
    # side: what follows (OneVision's `math.sqrt(rows * cols / ...) > 1.1`) is decided on
    # their bounds, which `rows - 2 * top` would lose once torch expands it.
    kept = features
    for axis, pad, length, now in ((1, pad_rows, rows, rows_now), (2, pad_cols, cols, cols_now)):
        start, count = _count(pad, 0, _most(length) // 2), _count(now - 2 * pad, 0, _most(length))
        kept = kept.narrow(axis, start, count)
    return kept


def _most(size: int | torch.SymInt) -> int:
    """The largest value ``size`` can take, as torch.export knows it (a bound of the grid)."""
    if isinstance(size, int):
        return size
    node = size.node
    found = bound_sympy(node.expr, node.shape_env.var_to_range).upper
    return int(found) if found.is_finite else sys.maxsize


def _traced(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


class _Grids:
    """One image's crop grid, read once per capture and shared by both helpers."""

    def __init__(self) -> None:
        self._found: dict[tuple[Any, ...], tuple[Any, Any, torch.Tensor]] = {}

    def get(
        self, size: torch.Tensor, pinpoints: Sequence[Sequence[int]], patch: int, ceil: bool
    ) -> tuple[Any, Any]:
        exact = all(v % patch == 0 for p in pinpoints for v in p)  # ceil == floor
        base = size._base if size._base is not None else size
        where = (id(base), size.storage_offset(), tuple(size.stride()))
        key: tuple[Any, ...] = (*where, patch, str(pinpoints), None if exact else ceil)
        if key not in self._found:
            high, wide = crop_grid(size, pinpoints, patch, ceil)
            self._found[key] = (high, wide, base)  # the base kept: its id stays unique
        high, wide, _ = self._found[key]
        return high, wide


def _num_patches(original: Callable[..., Any], grids: _Grids) -> Callable[..., Any]:
    def image_size_to_num_patches(image_size: Any, grid_pinpoints: Any, patch_size: int) -> Any:
        if not _traced(image_size) or not isinstance(grid_pinpoints, list):
            return original(image_size, grid_pinpoints, patch_size)
        high, wide = grids.get(image_size, grid_pinpoints, patch_size, ceil=True)
        return high * wide + 1

    return image_size_to_num_patches


def _grid_shape(original: Callable[..., Any], grids: _Grids) -> Callable[..., Any]:
    def get_anyres_image_grid_shape(image_size: Any, grid_pinpoints: Any, patch_size: int) -> Any:
        if not _traced(image_size) or not isinstance(grid_pinpoints, list):
            return original(image_size, grid_pinpoints, patch_size)
        return grids.get(image_size, grid_pinpoints, patch_size, ceil=False)

    return get_anyres_image_grid_shape


def _unpad(original: Callable[..., Any], _grids: _Grids) -> Callable[..., Any]:
    def unpad_image(tensor: torch.Tensor, original_size: Any) -> Any:
        if not _traced(original_size):
            return original(tensor, original_size)
        return unpadded(tensor, original_size)

    return unpad_image


_MAKERS = {
    "image_size_to_num_patches": _num_patches,
    "get_anyres_image_grid_shape": _grid_shape,
    "unpad_image": _unpad,
}


@contextlib.contextmanager
def anyres_tensor_sizes() -> Iterator[None]:
    """Any-resolution helpers of transformers take ``image_sizes`` as tensors, while active.

    Example:
        >>> with anyres_tensor_sizes():
        ...     pass
    """
    grids = _Grids()
    replaced: list[tuple[Any, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("transformers.models.") or module is None:
            continue
        for helper in _HELPERS:
            original = vars(module).get(helper)
            if callable(original) and getattr(original, "__module__", None) == name:
                replaced.append((module, helper, _MAKERS[helper](original, grids)))
    with swapped(*replaced):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="anyres",
    targets=(
        Target(
            "transformers.models.llava_next.modeling_llava_next",
            "image_size_to_num_patches",
            example=True,
        ),
        Target(
            "transformers.models.llava_next.modeling_llava_next",
            "get_anyres_image_grid_shape",
            example=True,
        ),
        Target("transformers.models.llava_next.modeling_llava_next", "unpad_image", example=True),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="any-resolution image grids are computed from image_sizes with Python numbers",
    apply=lambda call: anyres_tensor_sizes(),
)
