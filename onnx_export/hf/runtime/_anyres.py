"""LLaVA-NeXT's images of any resolution, without torch: tiles in, packed features out.

The number of image tokens depends on each image's size, so nothing that depends on it
is in the graphs: ``vision_encoder.onnx`` encodes a dynamic number of square tiles
(``pixel_values`` (tiles, channels, tile, tile) -> ``image_features`` (tiles, tokens per
tile, hidden)) and gives the model's ``image_newline`` vector as a second output. Here,
with numpy, as transformers' ``LlavaNextImageProcessor`` and ``LlavaNextModel`` do:

- preprocessing: the grid resolution of ``image_grid_pinpoints`` that keeps the most of
  the image (:func:`best_resolution`), the image resized into it with its aspect ratio
  kept, padded with zeros to it, cut into tiles, and the whole image resized to one tile
  in front (the base image); each tile then processed as a CLIP image;
- packing (:func:`pack`): the tiles' features laid out as the grid, the padding rows or
  columns cut off (back to the image's aspect ratio), an ``image_newline`` at the end of
  every row, after the base image's features. Their count is the image's token count.

LLaVA-OneVision tiles the same way, but downsamples a grid of more than
``anyres_max_N`` (its ``vision_aspect_ratio``) tiles' worth of features with a bilinear
interpolation (:func:`bilinear`, torch's ``interpolate`` without corner alignment), and
the images of a prompt with several are padded square with the mean colour (:func:`square`)
and encoded as one tile each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import CheckpointError, GenerationError
from onnx_export.hf.runtime._session import ONNX_TO_NUMPY

__all__ = [
    "best_resolution",
    "fitted_size",
    "tiles",
    "square",
    "tile_count",
    "bilinear",
    "pack",
    "AnyResolution",
]


def best_resolution(
    height: int, width: int, resolutions: Sequence[Sequence[int]]
) -> tuple[int, int]:
    """The (height, width) of ``resolutions`` that shows the most of the image, least waste."""
    best, most, waste = None, 0, math.inf
    for h, w in resolutions:
        scale = min(w / width, h / height)
        shown = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - shown
        if shown > most or (shown == most and wasted < waste):
            best, most, waste = (int(h), int(w)), shown, wasted
    if best is None:
        raise CheckpointError(
            f"image_grid_pinpoints {list(resolutions)} gives no resolution for an image of "
            f"{height}x{width}: the config needs a list of [height, width] pairs."
        )
    return best


def fitted_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """The image's size resized into ``target`` with its aspect ratio kept (ceil, capped)."""
    scale_h, scale_w = target[0] / height, target[1] / width
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), target[0]), target[1]
    return target[0], min(math.ceil(width * scale_h), target[1])


def tiles(
    picture: Any,
    pinpoints: Sequence[Sequence[int]],
    tile: int,
    base: tuple[int, int],
    resample: int,
) -> list[npt.NDArray[np.uint8]]:
    """The base image (resized to ``base``) and the tiles of the padded best resolution."""
    target = best_resolution(picture.height, picture.width, pinpoints)
    height, width = fitted_size(picture.height, picture.width, target)
    resized = np.atleast_3d(np.asarray(picture.resize((width, height), resample=resample)))
    top, left = (target[0] - height) // 2, (target[1] - width) // 2
    padded = np.zeros((*target, resized.shape[2]), np.uint8)
    padded[top : top + height, left : left + width] = resized
    cut = [
        padded[i : i + tile, j : j + tile]
        for i in range(0, target[0], tile)
        for j in range(0, target[1], tile)
    ]
    whole = np.asarray(picture.resize((base[1], base[0]), resample=resample))
    return [whole, *cut]


def square(image: npt.NDArray[np.uint8], mean: Sequence[float]) -> npt.NDArray[np.uint8]:
    """An (H, W, C) image centred on a square of its longest side, filled with ``mean``."""
    image = np.atleast_3d(image)
    height, width, channels = image.shape
    side = max(height, width)
    out = np.empty((side, side, channels), np.uint8)
    out[:] = np.asarray([int(m * 255) for m in mean], np.uint8)[:channels]
    top, left = (side - height) // 2, (side - width) // 2
    out[top : top + height, left : left + width] = image
    return out


def bilinear(grid: npt.NDArray[np.float32], height: int, width: int) -> npt.NDArray[np.float32]:
    """(H, W, hidden) resized to (height, width): torch's bilinear, corners not aligned."""
    for axis, size in ((0, height), (1, width)):
        old = grid.shape[axis]
        source = np.maximum((np.arange(size, dtype=np.float32) + 0.5) * (old / size) - 0.5, 0)
        low = np.minimum(np.floor(source).astype(np.int64), old - 1)
        high = np.minimum(low + 1, old - 1)
        weight = (source - low).astype(np.float32)
        shape = [1, 1, 1]
        shape[axis] = size
        weight = weight.reshape(shape)
        grid = (
            np.take(grid, low, axis=axis) * (1 - weight) + np.take(grid, high, axis=axis) * weight
        )
    return grid.astype(np.float32)


def tile_count(height: int, width: int, pinpoints: Sequence[Sequence[int]], tile: int) -> int:
    """How many tiles (with the base image) an image of ``height`` x ``width`` becomes."""
    rows, columns = best_resolution(height, width, pinpoints)
    return math.ceil(rows / tile) * math.ceil(columns / tile) + 1


def _unpadded(rows: int, columns: int, height: int, width: int) -> tuple[slice, slice]:
    """The part of a (rows, columns) feature grid that is the image, not its padding."""
    if width / height > columns / rows:
        new = int(round(height * (columns / width), 7))
        pad = (rows - new) // 2
        return slice(pad, rows - pad), slice(0, columns)
    new = int(round(width * (rows / height), 7))
    pad = (columns - new) // 2
    return slice(0, rows), slice(pad, columns - pad)


def pack(
    features: npt.NDArray[np.float32],
    size: tuple[int, int],
    pinpoints: Sequence[Sequence[int]],
    tile: int,
    newline: npt.NDArray[np.float32],
    most: int | None = None,
) -> npt.NDArray[np.float32]:
    """One image's tiles' features (tiles, side * side, hidden) -> its (tokens, hidden).

    ``most``: LLaVA-OneVision's tiles' worth of features a grid keeps (``anyres_max_N``).
    """
    hidden = features.shape[-1]
    if features.shape[0] == 1:  # the base image alone
        return np.concatenate([features[0], newline[None]])
    side = math.isqrt(features.shape[1])
    target = best_resolution(size[0], size[1], pinpoints)
    rows, columns = target[0] // tile, target[1] // tile
    grid = features[1:].reshape(rows, columns, side, side, hidden)
    grid = grid.transpose(0, 2, 1, 3, 4).reshape(rows * side, columns * side, hidden)
    grid = grid[_unpadded(rows * side, columns * side, size[0], size[1])]
    ratio = math.sqrt(grid.shape[0] * grid.shape[1] / (most * side**2)) if most else 0.0
    if ratio > 1.1:
        grid = bilinear(grid, int(grid.shape[0] // ratio), int(grid.shape[1] // ratio))
    ends = np.broadcast_to(newline, (grid.shape[0], 1, hidden))
    lines = np.concatenate([grid, ends], axis=1).reshape(-1, hidden)
    return np.concatenate([features[0], lines])


class AnyResolution:
    """A LLaVA-NeXT (-OneVision) folder's vision encoder: each image's tiles encoded, packed.

    Attributes:
        vision: The vision encoder's ``onnxruntime.InferenceSession``.
        pinpoints: The config's ``image_grid_pinpoints``.
        tile: The vision tower's image size (one tile's side, in pixels).
        several: LLaVA-OneVision: an image of one tile then zero tiles is not tiled.
        most: LLaVA-OneVision's ``anyres_max_N``: tiles' worth of features a grid keeps.
    """

    def __init__(self, vision: Any, config: Mapping[str, Any]) -> None:
        self.vision = vision
        found = config.get("vision_config")
        vision_config = found if isinstance(found, Mapping) else {}
        self.pinpoints = [list(p) for p in config.get("image_grid_pinpoints") or []]
        self.tile = int(vision_config.get("image_size", 0) or 0)
        if not self.pinpoints or not self.tile:
            raise CheckpointError(
                "config.json lacks image_grid_pinpoints or vision_config.image_size, which "
                "a LLaVA-NeXT folder's images of any resolution need: re-export the checkpoint."
            )
        self._dtype = ONNX_TO_NUMPY.get(vision.get_inputs()[0].type, np.float32)
        #: LLaVA-OneVision: images of multi-image prompts come as one tile each.
        self.several = config.get("model_type") == "llava_onevision"
        aspect = str(config.get("vision_aspect_ratio") or "")  # LLaVA-OneVision's
        self.most = (
            int(aspect.removeprefix("anyres_max_")) if aspect.startswith("anyres_max_") else None
        )

    @classmethod
    def of(cls, vision: Any, config: Mapping[str, Any]) -> AnyResolution | None:
        """The folder's, when its vision encoder gives ``image_newline``; else ``None``."""
        names = {o.name for o in vision.get_outputs()}
        return cls(vision, config) if "image_newline" in names else None

    def features(self, pixel_values: Any, image_sizes: Any) -> list[npt.NDArray[np.float32]]:
        """Each image's packed (tokens, hidden) features.

        ``pixel_values``: the processor's (images, tiles, channels, tile, tile), padded
        with zero tiles to the most tiles, or a list of (tiles, ...) arrays;
        ``image_sizes``: each image's (height, width) before processing. An image with
        one tile and zeros after it is one of several in a prompt (LLaVA-OneVision's
        processor does not tile those).
        """
        if image_sizes is None:
            raise GenerationError(
                "This folder's images are tiled by their size (LLaVA-NeXT): pass image_sizes "
                "with pixel_values (its processor gives both)."
            )
        pairs = np.asarray(image_sizes, np.int64).reshape(-1, 2).tolist()
        sizes = [(int(h), int(w)) for h, w in pairs]
        images = list(pixel_values) if isinstance(pixel_values, (list, tuple)) else None
        if images is None:
            pixels = np.asarray(pixel_values)
            images = list(pixels) if pixels.ndim == 5 else [pixels]
        counts = [tile_count(h, w, self.pinpoints, self.tile) for h, w in sizes]
        if self.several:
            counts = [1 if _one_tile(i) else n for i, n in zip(images, counts, strict=False)]
        if len(images) != len(sizes) or any(
            np.ndim(i) != 4 or len(i) < n for i, n in zip(images, counts, strict=False)
        ):
            raise GenerationError(
                f"pixel_values must hold {len(sizes)} image(s) of {counts} tiles, (images, "
                f"tiles, channels, {self.tile}, {self.tile}), for image_sizes {sizes}; got "
                f"{[np.shape(i) for i in images]}: give the processor's outputs together."
            )
        packed = []
        for image, size, count in zip(images, sizes, counts, strict=True):
            feed = {"pixel_values": np.asarray(image[:count], dtype=self._dtype)}
            out, newline = self.vision.run(["image_features", "image_newline"], feed)
            feats = np.asarray(out, dtype=np.float32)
            ends = np.asarray(newline, np.float32)
            packed.append(pack(feats, size, self.pinpoints, self.tile, ends, self.most))
        return packed


def _one_tile(image: Any) -> bool:
    """Whether ``image`` (tiles, ...) is one tile, or one followed by zero (padding) tiles."""
    tiles = np.asarray(image)
    return tiles.ndim == 4 and (len(tiles) == 1 or not tiles[1:].any())
