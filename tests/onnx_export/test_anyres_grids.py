"""Any-resolution image grids sized by ``image_sizes`` values (#28).

LLaVA-NeXT (and -Video, OneVision, Granite-4-Vision) picks each image's crop grid from
its ``image_sizes`` row and cuts the aspect-ratio padding off the grid's features, in
Python numbers: torch.export stopped at ``select_best_resolution``'s first comparison.
``capture/patches/_anyres.py`` computes the same with tensor ops; the number of image features
then follows ``image_sizes`` in the exported program. The tensor forms are checked
against transformers' helpers over many sizes, and a tiny LLaVA-NeXT exported at one
``image_sizes`` is checked against eager at others (other grids, other padding).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import onnx_export
from onnx_export.capture.patches._anyres import anyres_tensor_sizes, best_resolution, unpadded
from tests.capture_patches import refused_without
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")
llava_next = pytest.importorskip("transformers.models.llava_next.modeling_llava_next")

PINPOINTS = [[8, 8], [8, 16], [16, 8], [16, 16], [8, 24]]
IMAGE_TOKEN = 3


def test_best_resolution_is_transformers_choice() -> None:
    from transformers.image_processing_utils import select_best_resolution

    for high, wide in itertools.product([1, 3, 7, 8, 9, 15, 16, 17, 40], repeat=2):
        want = select_best_resolution((high, wide), PINPOINTS)
        assert best_resolution(torch.tensor([high, wide]), PINPOINTS).tolist() == list(want)


def test_unpadded_is_transformers_unpad_image() -> None:
    features = torch.randn(2, 8, 12)
    for high, wide in itertools.product([1, 2, 5, 8, 13, 30, 45, 97], repeat=2):
        want = llava_next.unpad_image(features, (high, wide))
        got = unpadded(features, torch.tensor([high, wide]))
        assert torch.equal(got, want), (high, wide)


def test_helpers_restored_and_lists_unchanged() -> None:
    original = llava_next.image_size_to_num_patches
    with anyres_tensor_sizes():
        assert llava_next.image_size_to_num_patches is not original
        assert llava_next.image_size_to_num_patches((8, 20), PINPOINTS, 8) == 4  # a list: as before
        assert llava_next.image_size_to_num_patches(torch.tensor([8, 20]), PINPOINTS, 8) == 4
    assert llava_next.image_size_to_num_patches is original


def _llava_next() -> Any:
    config = transformers.LlavaNextConfig(
        text_config={
            "model_type": "llama", "vocab_size": 99, "hidden_size": 32, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        },
        vision_config={
            "model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 8, "patch_size": 4,
        },
        image_grid_pinpoints=PINPOINTS, image_token_index=IMAGE_TOKEN,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlavaNextModel(config).eval()


def _inputs(model: Any, sizes: list[list[int]]) -> dict[str, Any]:
    """Two images of ``sizes``, their image tokens first, then text, 60 tokens a row."""
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randn(2, 5, 3, 8, 8, generator=generator)  # at most 1 + 4 crops
    image_sizes = torch.tensor(sizes)
    with torch.no_grad():
        features = model.get_image_features(pixels, image_sizes).pooler_output
    ids = torch.randint(4, 99, (2, 60), generator=generator)
    for row, feature in enumerate(features):
        ids[row, : feature.shape[0]] = IMAGE_TOKEN
    return {"input_ids": ids, "pixel_values": pixels, "image_sizes": image_sizes}


def test_llava_next_features_follow_image_sizes() -> None:
    """Other grids (1x1 to 2x2 crops, 1x3) and other padding than the example's."""
    model = _llava_next()
    with torch.no_grad():
        program = export_and_check(model, **_inputs(model, [[8, 16], [20, 10]]))
        for sizes in ([[8, 8], [16, 9]], [[5, 30], [31, 17]], [[16, 16], [3, 40]]):
            assert_onnx_program_close(program, model, **_inputs(model, sizes))


def test_without_the_tensor_forms_llava_next_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof the capture patch is needed: transformers' own line fails to capture."""
    model = _llava_next()
    with torch.no_grad():
        error = refused_without(
            monkeypatch,
            "anyres",
            lambda: onnx_export.dynamo_export(model, **_inputs(model, [[8, 16], [20, 10]])),
        )
    first = str(error).splitlines()[0]
    assert "image_processing_utils.py:" in first and "scale = min(" in first


def _llava_onevision() -> Any:
    config = transformers.LlavaOnevisionConfig(
        text_config={
            "model_type": "qwen2", "vocab_size": 99, "hidden_size": 32, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        },
        vision_config={
            "model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 8,
        },
        image_grid_pinpoints=[[16, 16], [16, 32], [32, 16]], image_token_index=IMAGE_TOKEN,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlavaOnevisionModel(config).eval()


def test_llava_onevision_features_follow_image_sizes() -> None:
    """OneVision also asks ``math.sqrt(...) > 1.1`` of the unpadded grid: its bounds decide."""
    model = _llava_onevision()
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randn(2, 3, 3, 16, 16, generator=generator)  # at most 1 + 2 crops

    def inputs(sizes: list[list[int]]) -> dict[str, Any]:
        image_sizes = torch.tensor(sizes)
        with torch.no_grad():
            features = model.get_image_features(pixels, image_sizes).pooler_output
        ids = torch.randint(4, 99, (2, 40), generator=generator)
        for row, feature in enumerate(features):
            ids[row, : feature.shape[0]] = IMAGE_TOKEN
        return {"input_ids": ids, "pixel_values": pixels, "image_sizes": image_sizes}

    with torch.no_grad():
        program = export_and_check(model, **inputs([[45, 45], [20, 50]]))
        for sizes in ([[50, 20], [16, 16]], [[3, 90], [64, 31]]):
            assert_onnx_program_close(program, model, **inputs(sizes))
