"""Windowed vision attention whose window order transformers lists image by image (#28).

Qwen2.5-VL's vision tower (and the towers that call ``get_vision_window_index``) reorders
the merged patches window by window with a loop over ``grid_thw.tolist()``; capture
computes the order and the window boundaries with tensor ops
(``capture/patches/_vision_windows.py``). The tower is exported with a dynamic number of patches
and run on other images.
"""

from __future__ import annotations

import random

import pytest
import torch

import onnx_export
from onnx_export.capture.patches._vision_windows import window_order
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")
vision_utils = pytest.importorskip("transformers.vision_utils")
qwen2_5_vl = pytest.importorskip("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl")

_PATCH = 3 * 2 * 2 * 2  # channels * temporal patch * patch * patch


class Tower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.Qwen2_5_VLConfig(
            vision_config={
                "depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
                "out_hidden_size": 32, "patch_size": 2, "temporal_patch_size": 2,
                "spatial_merge_size": 2, "window_size": 8, "fullatt_block_indexes": [1],
            },
        ).vision_config  # fmt: skip
        torch.manual_seed(0)
        self.tower = qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel(config).eval()

    def forward(self, pixels: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        return self.tower(pixels, grid_thw=grid_thw).pooler_output  # type: ignore[no-any-return]


def _images(grid: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    patches = sum(t * h * w for t, h, w in grid)
    return torch.randn(patches, _PATCH), torch.tensor(grid)


def test_windowed_vision_tower_follows_other_images() -> None:
    model = Tower()
    options = onnx_export.ExportOptions(dynamic_shapes={"pixels": {0: "patches"}})
    with torch.no_grad():
        # Windows of 2x2 merged patches: partial windows, a grid that fills its windows.
        program = export_and_check(model, *_images([[1, 6, 10], [2, 4, 4]]), options=options)
        assert_onnx_program_close(program, model, *_images([[1, 10, 6], [1, 8, 12]]))


def test_window_order_equals_transformers_on_random_grids() -> None:
    for seed in range(60):
        rng = random.Random(seed)
        merge, patch = rng.choice([1, 2]), rng.choice([1, 2])
        window = rng.randint(1, 4)
        sizes = [(rng.randint(1, 3), rng.randint(1, 7), rng.randint(1, 7)) for _ in range(4)]
        grid = torch.tensor([[t, merge * h, merge * w] for t, h, w in sizes[: rng.randint(1, 4)]])
        index, cu = vision_utils.get_vision_window_index(grid, merge, window * merge * patch, patch)
        merged = int((grid[:, 0] * (grid[:, 1] // merge) * (grid[:, 2] // merge)).sum())
        order, ends = window_order(grid, merge, window, merged)
        assert torch.equal(order, index), seed
        bounds = torch.cat([torch.zeros(1, dtype=torch.int32), (ends * merge**2).int()])
        assert torch.equal(torch.unique_consecutive(bounds), cu), seed  # same boundaries


def test_towers_keep_their_function_outside_capture() -> None:
    from onnx_export.capture.patches._vision_windows import vision_windows

    original = qwen2_5_vl.get_vision_window_index
    with vision_windows():
        assert qwen2_5_vl.get_vision_window_index is not original
    assert qwen2_5_vl.get_vision_window_index is original
