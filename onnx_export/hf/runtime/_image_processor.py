"""Images to ``pixel_values`` without torch: transformers' CLIP- and SigLIP-style processing.

Reads the image processor's settings that ``save_pretrained`` wrote
(``preprocessor_config.json``, or the ``image_processor`` entry of
``processor_config.json``) and does what transformers' PIL image processors do, in the
same order and the same arithmetic: convert to RGB, resize with PIL (the shortest edge
to a length, keeping the aspect ratio, or to a height and width), center crop, rescale
(in float64, then float32) and normalize. Pillow and numpy only (the ``vision`` extra).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import CheckpointError, GenerationError

__all__ = ["ImageProcessor", "VISION_EXTRA"]

VISION_EXTRA = "pip install 'onnx-export[vision]'"


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
        return cls(_settings(pathlib.Path(path)))

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
