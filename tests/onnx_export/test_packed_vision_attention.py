"""Vision towers that attend image by image over one packed sequence (#28).

Qwen2-VL's vision attention (and GLM-4V's, ERNIE-4.5-VL's, ColQwen2's, Qwen2.5/3-VL's...)
splits the packed patches per image with ``lengths.tolist()`` unless a flash attention is
configured; capture switches those modules to one attention with a block-diagonal mask
built from ``cu_seqlens`` (``capture/_packed_attention.py``). The tower is exported with a
dynamic number of patches and run on other images (other sizes, another split).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")
qwen2_vl = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")

_PATCH = 3 * 2 * 4 * 4  # channels * temporal patch * patch * patch


def _tower(attention: str) -> Any:
    config = transformers.Qwen2VLConfig(
        vision_config={
            "depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 4, "mlp_ratio": 2,
            "patch_size": 4, "temporal_patch_size": 2, "spatial_merge_size": 2,
            "in_channels": 3,
        },
    ).vision_config  # fmt: skip
    config._attn_implementation = attention
    torch.manual_seed(0)
    return qwen2_vl.Qwen2VisionTransformerPretrainedModel(config).eval()


class Tower(torch.nn.Module):
    def __init__(self, tower: Any) -> None:
        super().__init__()
        self.tower = tower

    def forward(self, pixels: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        return self.tower(pixels, grid_thw=grid_thw).pooler_output  # type: ignore[no-any-return]


def _images(grid: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    patches = sum(t * h * w for t, h, w in grid)
    return torch.randn(patches, _PATCH), torch.tensor(grid)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_images_packed_in_one_sequence_attend_each_to_itself(attention: str) -> None:
    model = Tower(_tower(attention))
    options = onnx_export.ExportOptions(dynamic_shapes={"pixels": {0: "patches"}})
    with torch.no_grad():
        program = export_and_check(model, *_images([[1, 2, 4], [1, 4, 2]]), options=options)
        # Other images: other sizes, one of two frames (two chunks; the count of images
        # is fixed by transformers' code, `expand(len(grid_thw))`).
        assert_onnx_program_close(program, model, *_images([[2, 2, 2], [1, 4, 4]]))
    assert model.tower.config._attn_implementation == attention  # switched back after capture
