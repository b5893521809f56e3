"""Vision encoders that take one image a run, for :class:`OrtModelForImageTextToText`.

Qwen2-VL's (``hf/export/graphs/_qwen_vl.py``) takes one image's flat patches and grid
(and Qwen2.5-VL's windows); its decoder takes (3, batch, length) position ids, computed
here from each prompt's image grids (``hf/runtime/_mrope.py``). Mistral 3's takes one
image of any size (:func:`one_by_one`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._mrope import grids_per_prompt, rope_index, vision_window_index
from onnx_export.hf.runtime._session import ONNX_TO_NUMPY

__all__ = ["PatchedVision", "Grids", "one_by_one"]

#: Each prompt's images' (frames, rows, columns), in the order of its image tokens.
Grids = list[list[tuple[int, int, int]]]


class PatchedVision:
    """A Qwen2-VL folder's vision encoder runs and its prompts' M-RoPE position ids.

    Attributes:
        vision: The vision encoder's ``onnxruntime.InferenceSession``.
        image_token_id: The image placeholder token.
        merge: The vision config's ``spatial_merge_size``.
    """

    def __init__(self, vision: Any, config: Mapping[str, Any], image_token_id: int) -> None:
        self.vision = vision
        self.image_token_id = image_token_id
        found = config.get("vision_config")
        self._config = dict(found) if isinstance(found, Mapping) else {}
        self.merge = int(self._config.get("spatial_merge_size", 1) or 1)
        self._names = {i.name for i in vision.get_inputs()}
        self._dtype = ONNX_TO_NUMPY.get(vision.get_inputs()[0].type, np.float32)

    def features(self, pixel_values: Any, grid_thw: Any) -> list[npt.NDArray[np.float32]]:
        """Each image's (tokens, hidden) features, one image a run."""
        if grid_thw is None:
            raise GenerationError(
                "This folder's vision encoder takes flat patches with their grids: pass "
                "image_grid_thw with pixel_values (its processor gives both)."
            )
        grids = np.asarray(grid_thw, dtype=np.int64).reshape(-1, 3)
        pixels = np.asarray(pixel_values, dtype=np.float32)
        sizes = grids.prod(axis=1)
        if pixels.ndim != 2 or pixels.shape[0] != int(sizes.sum()):
            raise GenerationError(
                f"pixel_values has shape {pixels.shape}; the grids {grids.tolist()} need "
                f"({int(sizes.sum())}, patch size): the processor's flat patches."
            )
        features = []
        for grid, part in zip(grids, np.split(pixels, np.cumsum(sizes)[:-1]), strict=True):
            feed = {"pixel_values": part.astype(self._dtype), "image_grid_thw": grid[None]}
            if "window_index" in self._names:  # Qwen2.5-VL
                index, starts = vision_window_index(
                    [grid.tolist()],
                    self.merge,
                    int(self._config["window_size"]),
                    int(self._config["patch_size"]),
                )
                feed |= {"window_index": index, "cu_window_seqlens": starts}
            (out,) = self.vision.run(["image_features"], feed)
            features.append(np.asarray(out[0], dtype=np.float32))
        return features

    def prompt_grids(self, ids: npt.NDArray[np.int64], grid_thw: Any) -> Grids:
        """Each prompt's image grids, from how many image tokens it holds."""
        grids: list[list[int]] = []
        if grid_thw is not None:
            grids = np.asarray(grid_thw, np.int64).reshape(-1, 3).tolist()
        counts = (ids == self.image_token_id).sum(axis=1).tolist()
        if any(counts) and grid_thw is None:
            raise GenerationError(
                "The prompts hold image tokens but no image_grid_thw was given: pass the "
                "processor's image_grid_thw with the images."
            )
        return grids_per_prompt(counts, grids, self.merge)

    def positions(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64], prompts: Grids | None
    ) -> npt.NDArray[np.int64]:
        """(3, rows, length) position ids; ``ids`` may repeat each prompt side by side."""
        prompts = prompts or [[]]
        copies = ids.shape[0] // len(prompts)
        grids = [grid for row in range(ids.shape[0]) for grid in prompts[row // copies]]
        positions, _ = rope_index(ids, mask, grids, self.image_token_id, self.merge)
        return positions


def one_by_one(
    vision: Any, pixels: npt.NDArray[Any], image_sizes: Any, config: Mapping[str, Any]
) -> list[npt.NDArray[np.float32]]:
    """Each image cropped to its size (the processor pads a batch) and encoded alone."""
    sizes = [tuple(pixels.shape[2:])] * len(pixels)
    if image_sizes is not None:
        sizes = [tuple(s) for s in np.asarray(image_sizes, np.int64).reshape(-1, 2).tolist()]
    found = config.get("vision_config")
    patch = int(found.get("patch_size", 1)) if isinstance(found, Mapping) else 1
    side = patch * int(config.get("spatial_merge_size", 1) or 1)
    if len(sizes) != len(pixels) or any(min(h, w) < 2 * side for h, w in sizes):
        raise GenerationError(
            f"image_sizes {sizes} must give each of the {len(pixels)} images its height and "
            f"width, at least {2 * side} pixels a side (two merged patches): give the "
            "processor's image_sizes, and larger images."
        )
    features = []
    for image, (height, width) in zip(pixels, sizes, strict=True):
        crop = np.ascontiguousarray(image[None, :, :height, :width])
        (out,) = vision.run(["image_features"], {"pixel_values": crop})
        features.append(np.asarray(out[0], dtype=np.float32))
    return features
