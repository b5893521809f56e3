"""Images to ``pixel_values`` without torch: transformers' CLIP- and SigLIP-style processing.

Reads the image processor's settings that ``save_pretrained`` wrote
(``preprocessor_config.json``, or the ``image_processor`` entry of
``processor_config.json``) and does what transformers' PIL image processors do, in the
same order and the same arithmetic: convert to RGB, resize with PIL (the shortest edge
to a length, keeping the aspect ratio, or to a height and width), center crop, rescale
(in float64, then float32) and normalize. Pillow and numpy only (the ``vision`` extra).

Qwen2-VL's processor (settings with ``merge_size`` and ``temporal_patch_size``) resizes
each image to multiples of patch * merge within its minimum and maximum pixels
(``size``'s ``shortest_edge`` and ``longest_edge``), then cuts it into patches: the
image repeated over the temporal patch, flattened to (patches, channels * temporal
patch * patch * patch) in merge-block order, with its grid (1, rows, columns)
(:meth:`ImageProcessor.patches`).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import CheckpointError, GenerationError

__all__ = ["ImageProcessor", "VISION_EXTRA"]

VISION_EXTRA = "pip install 'onnx-export[vision]'"


def _merged_patch(folder: pathlib.Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Pixtral's processor resizes to its patch size times its ``spatial_merge_size``."""
    path = folder / "processor_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return settings
    patch, merge = data.get("patch_size"), data.get("spatial_merge_size")
    if not (isinstance(patch, int) and isinstance(merge, int)):
        return settings
    return {**settings, "patch_size": {"height": patch * merge, "width": patch * merge}}


def _pixtral_size(height: int, width: int, longest: int, patch: int) -> tuple[int, int]:
    """Pixtral's size: within ``longest`` a side (floored), then up to multiples of ``patch``."""
    ratio = max(height / longest, width / longest)
    if ratio > 1:
        height, width = math.floor(height / ratio), math.floor(width / ratio)
    return ((height - 1) // patch + 1) * patch, ((width - 1) // patch + 1) * patch


def _settings(folder: pathlib.Path) -> dict[str, Any]:
    """The image processor's settings: preprocessor_config.json, else processor_config.json's."""
    for name, key in (
        ("preprocessor_config.json", None),
        ("processor_config.json", "image_processor"),
    ):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{os.fspath(path)!r} is not readable JSON: {e}.") from e
        found = data.get(key) if key and isinstance(data, dict) else data
        if isinstance(found, dict) and found:
            return found
    raise CheckpointError(
        f"{os.fspath(folder)!r} has no image processor settings (preprocessor_config.json, or "
        "processor_config.json with an image_processor entry): save the checkpoint's processor "
        "beside its weights (processor.save_pretrained) before exporting it."
    )


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as e:
        raise GenerationError(f"Images need the Pillow package: {VISION_EXTRA}.") from e
    return Image


def _resized_size(height: int, width: int, size: Mapping[str, Any]) -> tuple[int, int]:
    """(height, width) after resizing, as transformers computes it."""
    if size.get("height") and size.get("width"):
        return int(size["height"]), int(size["width"])
    shortest = size.get("shortest_edge")
    if shortest and not size.get("longest_edge"):
        short, long = (width, height) if width <= height else (height, width)
        new_long = int(shortest * long / short)
        return (new_long, int(shortest)) if width <= height else (int(shortest), new_long)
    raise CheckpointError(
        f"The image processor's size {dict(size)} is not one this runtime resizes to "
        "({'height', 'width'} or {'shortest_edge'})."
    )


def _longest_edge_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """Idefics3's first resize: the longest edge to ``longest``, the other even, aspect kept."""
    if max(height, width) > 4096:
        raise GenerationError(f"An image of {height}x{width} passes 4096 pixels a side.")
    if width >= height:
        new_height = int(longest / (width / height))
        return new_height + new_height % 2 if new_height % 2 else new_height, longest
    new_width = int(longest * (width / height))
    return longest, new_width + new_width % 2 if new_width % 2 else new_width


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's size: multiples of ``factor``, within the pixel budget, aspect kept."""
    if max(height, width) / min(height, width) > 200:
        raise GenerationError(
            f"An image of {height}x{width} is more than 200 times longer than wide: crop it."
        )
    new_height, new_width = round(height / factor) * factor, round(width / factor) * factor
    if new_height * new_width > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        new_height = max(factor, math.floor(height / beta / factor) * factor)
        new_width = max(factor, math.floor(width / beta / factor) * factor)
    elif new_height * new_width < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        new_height = math.ceil(height * beta / factor) * factor
        new_width = math.ceil(width * beta / factor) * factor
    return new_height, new_width


def _patchify(
    image: npt.NDArray[np.float32], patch: int, merge: int, temporal: int
) -> tuple[npt.NDArray[np.float32], tuple[int, int, int]]:
    """(channels, height, width) -> (patches, channels * temporal * patch * patch), grid."""
    channels, height, width = image.shape
    rows, columns = height // patch, width // patch
    blocks = image.reshape(
        channels, rows // merge, merge, patch, columns // merge, merge, patch
    ).transpose(1, 4, 2, 5, 0, 3, 6)  # (row blocks, column blocks, merge, merge, C, P, P)
    frames = np.broadcast_to(
        blocks[:, :, :, :, :, None], (*blocks.shape[:5], temporal, *blocks.shape[5:])
    )
    flat = frames.reshape(rows * columns, channels * temporal * patch * patch)
    return np.ascontiguousarray(flat, dtype=np.float32), (1, rows, columns)


def _center_crop(image: npt.NDArray[Any], height: int, width: int) -> npt.NDArray[Any]:
    """The centre (height, width) of an (H, W, C) image, padded with zeros when smaller."""
    top, left = (image.shape[0] - height) // 2, (image.shape[1] - width) // 2
    if top >= 0 and left >= 0:
        return image[top : top + height, left : left + width]
    padded = np.zeros(
        (max(height, image.shape[0]), max(width, image.shape[1]), image.shape[2]), image.dtype
    )
    pad_top, pad_left = (
        -(-(padded.shape[0] - image.shape[0]) // 2),
        -(-(padded.shape[1] - image.shape[1]) // 2),
    )
    padded[pad_top : pad_top + image.shape[0], pad_left : pad_left + image.shape[1]] = image
    return _center_crop(padded, height, width)


class ImageProcessor:
    """A folder's image processor settings, applied with Pillow and numpy.

    Attributes:
        settings: The image processor's settings, as saved.

    Example:
        >>> from onnx_export.hf.runtime._image_processor import ImageProcessor
        >>> processor = ImageProcessor.from_folder("llava-onnx")  # doctest: +SKIP
        >>> processor([image]).shape  # doctest: +SKIP
        (1, 3, 336, 336)
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        unsupported = [k for k in ("do_pan_and_scan", "do_image_splitting") if settings.get(k)]
        if unsupported:
            raise CheckpointError(
                f"The image processor sets {', '.join(unsupported)}: this runtime makes one "
                "view of each image, without crops. Set it to false in the folder's "
                "processor_config.json (or preprocessor_config.json) to use the whole image."
            )

    @classmethod
    def from_folder(cls, path: str | os.PathLike[str]) -> ImageProcessor:
        """Read the settings from an exported (or checkpoint) folder."""
        folder = pathlib.Path(path)
        return cls(_merged_patch(folder, _settings(folder)))

    def _image(self, image: Any) -> Any:
        """``image`` (a PIL image, or an (H, W, C) uint8 array) as a PIL image."""
        pil = _pil()
        if isinstance(image, pil.Image):
            picture = image
        else:
            array = np.asarray(image)
            if array.dtype != np.uint8 or array.ndim not in (2, 3):
                raise GenerationError(
                    f"An image must be a PIL image or an (height, width, channels) uint8 array, "
                    f"got a {array.dtype} array of shape {array.shape}."
                )
            picture = pil.fromarray(
                array[..., 0] if array.ndim == 3 and array.shape[-1] == 1 else array
            )
        if self.settings.get("do_convert_rgb", True) and picture.mode != "RGB":
            picture = picture.convert("RGB")
        return picture

    def _one(self, image: Any) -> npt.NDArray[np.float32]:
        settings = self.settings
        picture = self._image(image)
        resample = int(settings.get("resample", 3))
        square = (settings.get("max_image_size") or {}).get("longest_edge")
        if settings.get("do_resize", True) and square:  # Idefics3: longest edge, then square
            longest = int((settings.get("size") or {})["longest_edge"])
            height, width = _longest_edge_size(picture.height, picture.width, longest)
            picture = picture.resize((max(width, 1), max(height, 1)), resample=resample)
            picture = picture.resize((int(square), int(square)), resample=resample)
        elif settings.get("do_resize", True) and isinstance(settings.get("patch_size"), dict):
            patch = int(settings["patch_size"]["height"])  # Pixtral (Mistral 3)
            longest = int((settings.get("size") or {})["longest_edge"])
            height, width = _pixtral_size(picture.height, picture.width, longest, patch)
            picture = picture.resize((width, height), resample=resample)
        elif settings.get("do_resize", True) and self.patched:
            size = settings.get("size") or {}
            factor = int(settings["patch_size"]) * int(settings["merge_size"])
            least = int(size.get("shortest_edge") or settings.get("min_pixels") or 56 * 56)
            most = int(size.get("longest_edge") or settings.get("max_pixels") or 28 * 28 * 1280)
            height, width = smart_resize(picture.height, picture.width, factor, least, most)
            picture = picture.resize((width, height), resample=resample)
        elif settings.get("do_resize", True):
            height, width = _resized_size(picture.height, picture.width, settings.get("size") or {})
            picture = picture.resize((width, height), resample=resample)
        array = np.asarray(picture)
        if array.ndim == 2:
            array = array[..., None]
        if settings.get("do_center_crop", False):
            crop = settings.get("crop_size") or {}
            array = _center_crop(array, int(crop["height"]), int(crop["width"]))
        values = array.astype(np.float64)
        if settings.get("do_rescale", True):
            values = values * float(settings.get("rescale_factor", 1 / 255))
        pixels = values.astype(np.float32)
        if settings.get("do_normalize", True):
            mean = np.asarray(settings.get("image_mean", 0.5), np.float32)
            std = np.asarray(settings.get("image_std", 0.5), np.float32)
            pixels = (pixels - mean) / std
        return np.ascontiguousarray(pixels.transpose(2, 0, 1), dtype=np.float32)

    @property
    def patched(self) -> bool:
        """Whether images become flat patches and grids (Qwen2-VL), see :meth:`patches`."""
        return "merge_size" in self.settings and "temporal_patch_size" in self.settings

    def patches(
        self, images: Sequence[Any]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Qwen2-VL's ``pixel_values`` (all images' patches, patch size) and ``image_grid_thw``.

        Example:
            >>> pixels, grids = processor.patches([image])  # doctest: +SKIP
            >>> pixels.shape, grids.tolist()  # doctest: +SKIP
            ((120, 1176), [[1, 10, 12]])
        """
        if not self.patched:
            raise CheckpointError(
                "The image processor has no merge_size and temporal_patch_size: its images "
                "are whole (call the processor itself), not patches."
            )
        patch, merge = int(self.settings["patch_size"]), int(self.settings["merge_size"])
        temporal = int(self.settings["temporal_patch_size"])
        cut = [_patchify(self._one(image), patch, merge, temporal) for image in images]
        grids = np.asarray([grid for _, grid in cut], np.int64).reshape(-1, 3)
        return np.concatenate([flat for flat, _ in cut]), grids

    def one_by_one(self, images: Sequence[Any]) -> list[npt.NDArray[np.float32]]:
        """Each image's ``pixel_values`` (1, channels, height, width), sizes of their own."""
        return [self._one(image)[None] for image in images]

    def __call__(self, images: Sequence[Any]) -> npt.NDArray[np.float32]:
        """``pixel_values`` (images, channels, height, width) float32 of ``images``."""
        processed = [self._one(image) for image in images]
        shapes = {p.shape for p in processed}
        if len(shapes) > 1:
            raise GenerationError(
                f"The images resize to different shapes {sorted(shapes)}; give images that "
                "resize to one size (or one image per call)."
            )
        return np.stack(processed)
