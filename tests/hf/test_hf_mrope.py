"""Qwen2-VL's numpy index computations (``hf/runtime/_mrope.py``) against transformers'.

The runtime computes what transformers computes in torch before the graphs run: the
M-RoPE position ids of a prompt (``get_rope_index``), Qwen2.5-VL's vision windows
(``get_vision_window_index``) and the image processor's smart resize and flat patches
(transformers' PIL processor, which needs no torchvision). Each is compared on layouts
the end-to-end tests do not reach: several images in one prompt, left padding, grids of
several frames, windows that do not divide the grid, extreme aspect ratios.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from onnx_export.hf._errors import CheckpointError, GenerationError
from onnx_export.hf.runtime._image_processor import ImageProcessor
from onnx_export.hf.runtime._mrope import grids_per_prompt, rope_index, vision_window_index

transformers = pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")

_IMAGE, _START, _END, _MERGE = 4, 5, 6, 2


@pytest.fixture(scope="module")
def qwen2_vl() -> Any:
    text = {
        "hidden_size": 32, "vocab_size": 96, "intermediate_size": 64, "num_attention_heads": 4,
        "num_hidden_layers": 1, "num_key_value_heads": 2,
        "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1]},
    }  # fmt: skip
    vision = {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 4, "patch_size": 4}
    config = transformers.Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=_IMAGE,
        vision_start_token_id=_START, vision_end_token_id=_END, video_token_id=7,
    )  # fmt: skip
    return transformers.Qwen2VLModel(config).eval()


def _prompt(pieces: list[Any], grids: list[list[int]]) -> list[int]:
    """Token ids: ints as text, ``"image"`` as the next grid's tokens between its markers."""
    ids: list[int] = []
    images = iter(grids)
    for piece in pieces:
        if piece == "image":
            t, h, w = next(images)
            ids += [_START, *[_IMAGE] * (t * h * w // _MERGE**2), _END]
        else:
            ids += [10 + i for i in range(piece)]
    return ids


_LAYOUTS = {
    "one-image": ([[3, "image", 4]], [[1, 4, 6]]),
    "two-images-in-a-prompt": ([[2, "image", 3, "image", 1]], [[1, 6, 4], [1, 2, 8]]),
    "image-first": ([["image", 2]], [[1, 8, 2]]),
    "two-frames": ([[1, "image", 2]], [[2, 4, 4]]),
    "padded-batch": ([[3, "image", 5], [1, "image", 1], [6]], [[1, 4, 6], [1, 10, 4]]),
    "text-only": ([[5], [2]], []),
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_rope_index_matches_transformers(qwen2_vl: Any, layout: str) -> None:
    prompts, grids = _LAYOUTS[layout]
    rows, at = [], 0
    for pieces in prompts:  # the grids are in the order of the prompts' images
        count = pieces.count("image")
        rows.append(_prompt(pieces, grids[at : at + count]))
        at += count
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):  # left padding
        ids[i, width - len(row) :], mask[i, width - len(row) :] = row, 1
    types = torch.from_numpy((ids == _IMAGE).astype(np.int64))
    grid_tensor = torch.tensor(grids, dtype=torch.long) if grids else None
    expected, deltas = qwen2_vl.get_rope_index(
        torch.from_numpy(ids), types, grid_tensor, attention_mask=torch.from_numpy(mask)
    )
    got, got_deltas = rope_index(ids, mask, grids, _IMAGE, _MERGE)
    np.testing.assert_array_equal(got, expected.numpy())
    np.testing.assert_array_equal(got_deltas, deltas.numpy())


@pytest.mark.parametrize(
    "grid",
    [[[1, 10, 12]], [[1, 8, 8]], [[1, 4, 6], [2, 6, 10]], [[1, 2, 2]], [[1, 16, 4]]],
    ids=str,
)
@pytest.mark.parametrize("window", [16, 32], ids=lambda w: f"window{w}")
def test_vision_windows_match_transformers(grid: list[list[int]], window: int) -> None:
    from transformers.vision_utils import get_vision_window_index

    index, starts = get_vision_window_index(torch.tensor(grid), _MERGE, window, 4)
    got_index, got_starts = vision_window_index(grid, _MERGE, window, 4)
    np.testing.assert_array_equal(got_index, index.numpy())
    np.testing.assert_array_equal(got_starts, starts.numpy())


def test_grids_are_split_by_prompt() -> None:
    grids = [[1, 4, 4], [1, 2, 4], [1, 4, 4]]
    assert grids_per_prompt([6, 4, 0], grids, _MERGE) == [
        [(1, 4, 4), (1, 2, 4)],
        [(1, 4, 4)],
        [],
    ]
    with pytest.raises(GenerationError, match="do not add up"):
        grids_per_prompt([5, 4], grids, _MERGE)
    with pytest.raises(GenerationError, match="one row per image"):
        grids_per_prompt([6], grids, _MERGE)


@pytest.mark.parametrize(
    "shape", [(40, 52), (52, 40), (30, 30), (9, 11), (200, 30), (8, 700), (300, 300)], ids=str
)
@pytest.mark.parametrize("budget", [(256, 2304), (64, 1024)], ids=lambda b: f"pixels{b}")
def test_patches_match_transformers(shape: tuple[int, int], budget: tuple[int, int]) -> None:
    """Smart resize within the pixel budget, rescale, normalize, flat patches, grid."""
    theirs = transformers.Qwen2VLImageProcessorPil(
        patch_size=4,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": budget[0], "longest_edge": budget[1]},
    )
    image = (np.random.default_rng(sum(shape)).random((*shape, 3)) * 255).astype(np.uint8)
    expected = theirs(image, return_tensors="np")
    processor = ImageProcessor(theirs.to_dict())
    assert processor.patched
    got, grid = processor.patches([PIL.fromarray(image), image])
    np.testing.assert_array_equal(grid, np.concatenate([expected["image_grid_thw"]] * 2))
    np.testing.assert_allclose(got, np.concatenate([expected["pixel_values"]] * 2), atol=1e-6)


def test_extreme_aspect_is_refused() -> None:
    processor = ImageProcessor(transformers.Qwen2VLImageProcessorPil(patch_size=4).to_dict())
    with pytest.raises(GenerationError, match="200 times"):
        processor.patches([np.zeros((2, 500, 3), np.uint8)])


def test_whole_image_processors_have_no_patches() -> None:
    processor = ImageProcessor({"size": {"height": 8, "width": 8}})
    assert not processor.patched
    with pytest.raises(CheckpointError, match="merge_size"):
        processor.patches([np.zeros((8, 8, 3), np.uint8)])
