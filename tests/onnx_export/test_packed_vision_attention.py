"""Vision towers that attend image by image over one packed sequence (#28).

Qwen2-VL's vision attention (and GLM-4V's, ERNIE-4.5-VL's, ColQwen2's, Qwen2.5/3-VL's...)
splits the packed patches per image with ``lengths.tolist()`` unless a flash attention is
configured; capture switches those modules to one attention with a block-diagonal mask
built from ``cu_seqlens`` (``capture/patches/_packed_attention.py``). The tower is exported with a
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


class TowerItself(Tower):
    """The tower exported as the model: its config is the model's own."""

    def __init__(self, tower: Any) -> None:
        torch.nn.Module.__init__(self)
        self.tower = tower
        self.config = tower.config


def _images(grid: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    patches = sum(t * h * w for t, h, w in grid)
    return torch.randn(patches, _PATCH), torch.tensor(grid)


@pytest.mark.parametrize("wrapped", [True, False], ids=["in-a-module", "the-tower-itself"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_images_packed_in_one_sequence_attend_each_to_itself(attention: str, wrapped: bool) -> None:
    model = Tower(_tower(attention)) if wrapped else TowerItself(_tower(attention))
    options = onnx_export.ExportOptions(dynamic_shapes={"pixels": {0: "patches"}})
    with torch.no_grad():
        program = export_and_check(model, *_images([[1, 2, 4], [1, 4, 2]]), options=options)
        # Other images: other sizes, one of two frames (two chunks; the count of images
        # is fixed by transformers' code, `expand(len(grid_thw))`).
        assert_onnx_program_close(program, model, *_images([[2, 2, 2], [1, 4, 4]]))
    assert model.tower.config._attn_implementation == attention  # switched back after capture


def _qwen2_vl() -> tuple[Any, dict[str, torch.Tensor]]:
    """A tiny Qwen2-VL (transformers' tester config): three texts with one image token each."""
    text = {
        "hidden_size": 32, "vocab_size": 99, "intermediate_size": 37, "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 2,
        "rope_parameters": {"type": "mrope", "mrope_section": [2, 1, 1]},
    }  # fmt: skip
    vision = {
        "depth": 2, "embed_dim": 32, "hidden_size": 32, "mlp_ratio": 4, "num_heads": 4,
        "patch_size": 14, "spatial_merge_size": 1, "temporal_patch_size": 2,
    }  # fmt: skip
    config = transformers.Qwen2VLConfig(
        text_config=text, vision_config=vision, vision_start_token_id=3, image_token_id=4,
        video_token_id=5,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2VLModel(config).eval()
    ids = torch.randint(6, 99, (3, 7))
    ids[:, 1], ids[:, 2] = 3, 4  # vision start, then the image's one token
    types = torch.zeros_like(ids)
    types[:, 2] = 1
    inputs = {
        "input_ids": ids, "pixel_values": torch.randn(3, 3 * 2 * 14 * 14),
        "image_grid_thw": torch.tensor([[1, 1, 1]] * 3), "mm_token_type_ids": types,
    }  # fmt: skip
    return model, inputs


class _OwnPositions(transformers.Qwen2VLModel):  # type: ignore[misc]
    """A model whose ``get_rope_index`` is its own code (capture does not switch it)."""

    def get_rope_index(self, *args: Any, **kwargs: Any) -> Any:
        return super().get_rope_index(*args, **kwargs)


def test_multimodal_positions_from_token_ids_name_position_ids_as_the_way_out() -> None:
    """M-RoPE positions computed in Python by code capture does not know (here a subclass
    of its own): the error's first line names that line and ``position_ids``; with them, it
    exports. (Qwen2-VL's own code is captured as tensor ops: test_multimodal_rope.py.)"""
    model, inputs = _qwen2_vl()
    model.__class__ = _OwnPositions
    with torch.no_grad(), pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(model, **inputs)
    first = str(caught.value).splitlines()[0]
    assert "get_rope_index" in first and "position_ids" in first, first
    assert "modeling_qwen2_vl.py:" in first, first
    types = inputs["mm_token_type_ids"]
    positions, _ = model.get_rope_index(inputs["input_ids"], types, inputs["image_grid_thw"])
    with torch.no_grad():
        export_and_check(model, **inputs, position_ids=positions, rtol=1e-3, atol=1e-4)
