"""Multimodal rotary positions computed from the token ids, captured as tensor ops (#28).

Vision-language models of the Qwen2-VL kind called without ``position_ids`` compute them in
``get_rope_index`` with Python loops over the token types and ``.item()`` on the grids;
capture switches that function to one made of cumulative sums and gathers
(``capture/patches/_mrope.py``). The exported graph computes the positions of other texts, other
image placements and other image sizes as eager does.
"""

from __future__ import annotations

import random
import types
from typing import Any

import pytest
import torch

import onnx_export
from onnx_export.capture.patches._mrope import multimodal_rope
from onnx_export.capture.patches._mrope_index import RopeLayout, multimodal_positions
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")

_IMAGE, _VIDEO, _START = 4, 5, 3  # token ids: image, video, vision start
_TEXT = {
    "hidden_size": 32, "vocab_size": 99, "intermediate_size": 37, "num_attention_heads": 4,
    "num_hidden_layers": 1, "num_key_value_heads": 2, "pad_token_id": 0,
    "rope_parameters": {"type": "mrope", "mrope_section": [2, 1, 1]},
}  # fmt: skip
_PATCH, _TEMPORAL = 2, 2


def _qwen2_vl() -> Any:
    vision = {
        "depth": 1, "embed_dim": 16, "hidden_size": 32, "mlp_ratio": 2, "num_heads": 2,
        "patch_size": _PATCH, "spatial_merge_size": 2, "temporal_patch_size": _TEMPORAL,
    }  # fmt: skip
    config = transformers.Qwen2VLConfig(
        text_config=_TEXT, vision_config=vision, vision_start_token_id=_START,
        image_token_id=_IMAGE, video_token_id=_VIDEO,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.Qwen2VLModel(config).eval()


def _glm4v() -> Any:
    text = {**_TEXT, "rope_parameters": {"type": "default", "mrope_section": [2, 1, 1]}}
    vision = {
        "depth": 1, "hidden_size": 32, "out_hidden_size": 32, "intermediate_size": 22,
        "num_heads": 2, "patch_size": _PATCH, "spatial_merge_size": 2,
        "temporal_patch_size": _TEMPORAL, "image_size": 8,
    }  # fmt: skip
    config = transformers.Glm4vConfig(
        text_config=text, vision_config=vision, image_start_token_id=_START,
        image_token_id=_IMAGE, video_token_id=_VIDEO,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.Glm4vModel(config).eval()


def _inputs(rows: list[list[Any]], length: int) -> dict[str, torch.Tensor]:
    """Left-padded rows of text lengths (ints) and images (``(h, w)`` patch grids)."""
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    kinds, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    grids: list[list[int]] = []
    for b, row in enumerate(rows):
        tokens: list[int] = []
        for part in row:
            if isinstance(part, int):
                tokens += [random.randrange(10, 99) for _ in range(part)] + [_START]
            else:
                grids.append([1, *part])
                tokens += [_IMAGE] * (part[0] * part[1] // 4)
        first = length - len(tokens)
        ids[b, first:] = torch.tensor(tokens)
        kinds[b, first:] = (ids[b, first:] == _IMAGE).long()
        mask[b, first:] = 1
    patches = sum(h * w for _, h, w in grids)
    return {
        "input_ids": ids, "attention_mask": mask, "mm_token_type_ids": kinds,
        "pixel_values": torch.randn(patches, 3 * _TEMPORAL * _PATCH * _PATCH),
        "image_grid_thw": torch.tensor(grids),
    }  # fmt: skip


_AXES = {
    "input_ids": {1: "length"},
    "attention_mask": {1: "length"},
    "mm_token_type_ids": {1: "length"},
    "pixel_values": {0: "patches"},
}
_DYNAMIC = onnx_export.ExportOptions(dynamic_shapes=_AXES)


@pytest.mark.parametrize("make", [_qwen2_vl, _glm4v], ids=["qwen2_vl", "glm4v"])
def test_positions_from_token_ids_follow_other_texts_and_images(make: Any) -> None:
    model = make()
    random.seed(0)
    exported = _inputs([[2, (4, 2), 3], [1, (2, 4), 1]], 11)
    # Longer texts, the images elsewhere and of other sizes (one row padded).
    other = _inputs([[4, (4, 4), 1], [1, (2, 2), 6]], 13)
    with torch.no_grad():
        program = export_and_check(model, **exported, options=_DYNAMIC, rtol=1e-3, atol=1e-4)
        assert_onnx_program_close(program, model, **other, rtol=1e-3, atol=1e-4)
    # Tracing stored a traced tensor in the model's cache of deltas; eager's values are there.
    assert type(model.rope_deltas) is torch.Tensor, type(model.rope_deltas)


def _qwen2_5_vl_with_video(
    texts: list[int], image: tuple[int, int], video: tuple[int, int, int], seconds: float, pad: int
) -> dict[str, torch.Tensor]:
    """One left-padded row: text, an image, text, a video (``seconds`` per grid), text."""
    (hi, wi), (frames, hv, wv) = image, video

    def text(n: int) -> list[int]:
        return [random.randrange(10, 99) for _ in range(n)]

    tokens = [*text(texts[0]), _START, *[_IMAGE] * (hi * wi // 4), *text(texts[1]), _START]
    tokens += [_VIDEO] * (frames * hv * wv // 4) + text(texts[2])
    ids = torch.zeros(1, len(tokens) + pad, dtype=torch.long)
    ids[0, pad:] = torch.tensor(tokens)
    return {
        "input_ids": ids, "attention_mask": (torch.arange(ids.shape[1]) >= pad).long()[None],
        "mm_token_type_ids": (ids == _IMAGE).long() + 2 * (ids == _VIDEO).long(),
        "pixel_values": torch.randn(hi * wi, 3 * _TEMPORAL * _PATCH * _PATCH),
        "image_grid_thw": torch.tensor([[1, hi, wi]]),
        "pixel_values_videos": torch.randn(frames * hv * wv, 3 * _TEMPORAL * _PATCH * _PATCH),
        "video_grid_thw": torch.tensor([[frames, hv, wv]]),
        "second_per_grid_ts": torch.tensor([seconds]),
    }  # fmt: skip


def test_video_frames_spaced_by_seconds_follow_other_videos() -> None:
    """Qwen2.5-VL: a video's temporal positions are frame * tokens_per_second * seconds,
    truncated (a float product in the graph); its tower attends in windows."""
    vision = {
        "depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
        "out_hidden_size": 32, "patch_size": _PATCH, "temporal_patch_size": _TEMPORAL,
        "spatial_merge_size": 2, "window_size": 8, "fullatt_block_indexes": [1],
        "tokens_per_second": 3,
    }  # fmt: skip
    config = transformers.Qwen2_5_VLConfig(
        text_config=_TEXT, vision_config=vision, vision_start_token_id=_START,
        image_token_id=_IMAGE, video_token_id=_VIDEO,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2_5_VLModel(config).eval()
    random.seed(0)
    exported = _qwen2_5_vl_with_video([2, 1, 2], (4, 6), (2, 4, 4), 0.7, 2)
    other = _qwen2_5_vl_with_video([3, 2, 1], (6, 4), (3, 4, 6), 1.3, 0)
    axes = {**_AXES, "pixel_values_videos": {0: "video_patches"}}
    options = onnx_export.ExportOptions(dynamic_shapes=axes)
    with torch.no_grad():
        program = export_and_check(model, **exported, options=options, rtol=1e-3, atol=1e-4)
        assert_onnx_program_close(program, model, **other, rtol=1e-3, atol=1e-4)


def _call_original(model: Any, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return type(model).get_rope_index(model, **inputs)  # type: ignore[no-any-return]


def _random_batch(
    seed: int, merge: int, split_videos: bool = False, temporal_merge: int = 1, padded: bool = True
) -> dict[str, Any]:
    """Three rows of text, images and videos; padding right, left and in the middle."""
    rng = random.Random(seed)
    rows: list[list[int]] = []
    images: list[list[int]] = []
    videos: list[list[int]] = []
    for _ in range(3):
        row: list[int] = [0] * rng.randint(1, 3)
        for _ in range(rng.randint(0, 3)):
            t = temporal_merge * rng.randint(1, 3)
            h, w = merge * rng.randint(1, 3), merge * rng.randint(1, 3)
            tokens = h * w // (merge * merge)
            if rng.random() < 0.5:
                images.append([1, h, w])
                row += [1] * tokens
            else:
                videos.append([t, h, w])
                if split_videos:  # each frame after its timestamp (text)
                    for _ in range(t):
                        row += [0] * rng.randint(1, 2) + [2] * tokens
                else:
                    row += [2] * (t // temporal_merge * tokens)
            row += [0] * rng.randint(1, 2)
        rows.append(row)
    length = max(len(r) for r in rows) + 3
    kinds = torch.zeros(3, length, dtype=torch.long)
    mask = torch.zeros_like(kinds)
    for b, row in enumerate(rows):
        places = [
            list(range(len(row))),
            list(range(length - len(row), length)),
            sorted(rng.sample(range(length), len(row))) if padded else list(range(len(row))),
        ][b]
        kinds[b, places], mask[b, places] = torch.tensor(row), 1
    return {
        "input_ids": torch.randint(10, 99, (3, length)),
        "mm_token_type_ids": kinds,
        "image_grid_thw": torch.tensor(images) if images else None,
        "video_grid_thw": torch.tensor(videos) if videos else None,
        "attention_mask": mask if padded else None,
    }


@pytest.mark.parametrize("make", [_qwen2_vl, _glm4v], ids=["qwen2_vl", "glm4v"])
@pytest.mark.parametrize("masked", [True, False], ids=["padded", "unpadded"])
def test_tensor_positions_equal_transformers_on_random_batches(make: Any, masked: bool) -> None:
    model = make()
    split = make is _glm4v  # GLM-4V: timestamps between a video's frames
    layout = RopeLayout(2, split_videos=split)
    for seed in range(25):
        batch = _random_batch(seed, 2, split, padded=masked)  # unpadded: text fills the rows
        expected = _call_original(model, **batch)
        ours = multimodal_positions(layout, **batch)
        assert torch.equal(ours[0], expected[0]), seed
        assert torch.equal(ours[1], expected[1]), seed


def _fake_model(cls: type, **vision: Any) -> Any:
    """An instance-like object of ``cls`` for its ``get_rope_index`` (config and helper only)."""
    config = types.SimpleNamespace(vision_config=types.SimpleNamespace(**vision))
    fake = types.SimpleNamespace(config=config)
    fake.get_vision_position_ids = cls.get_vision_position_ids.__get__(fake)  # type: ignore[attr-defined]
    return fake


def test_seconds_per_grid_and_temporal_merge_variants_equal_transformers() -> None:
    """Qwen2.5-VL spaces a video's frames by seconds; ERNIE-4.5-VL merges frames."""
    qwen2_5 = pytest.importorskip("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl")
    ernie = pytest.importorskip("transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe")
    cls = qwen2_5.Qwen2_5_VLModel
    model = _fake_model(cls, spatial_merge_size=2, tokens_per_second=4)
    for seed in range(15):
        batch = _random_batch(seed, 2)
        videos = batch["video_grid_thw"]
        if videos is not None:
            batch["second_per_grid_ts"] = torch.rand(len(videos)) * 3
        expected = cls.get_rope_index(model, **batch)
        ours = multimodal_positions(RopeLayout(2, tokens_per_second=4), **batch)
        assert all(torch.equal(o, e) for o, e in zip(ours, expected, strict=True)), seed
    cls = ernie.Ernie4_5_VLMoeModel
    model = _fake_model(cls, spatial_merge_size=2, temporal_merge_size=2)
    for seed in range(10):
        batch = _random_batch(seed, 2, temporal_merge=2)
        expected = cls.get_rope_index(model, **batch)
        ours = multimodal_positions(RopeLayout(2, video_temporal_merge=2), **batch)
        assert all(torch.equal(o, e) for o, e in zip(ours, expected, strict=True)), seed


def test_the_switch_is_undone_after_capture() -> None:
    model = _qwen2_vl()
    original = type(model).get_rope_index
    with multimodal_rope(model):
        assert type(model).get_rope_index is not original
    assert type(model).get_rope_index is original
