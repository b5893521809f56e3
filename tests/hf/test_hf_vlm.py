"""Vision-language models (``image-text-to-text``) end to end, family by family.

A tiny checkpoint and its processor (``vlm_checkpoints.py``) are exported; then our
numpy image processing gives transformers' ``pixel_values``, ``generate`` (greedy, beams,
left-padded batches, streaming) gives the tokens transformers' ``generate()`` gives for
the same images and prompts, the pipeline (image and prompt in, text out) gives its
text, and all of it runs where torch cannot be imported. Families this exporter does
not export are refused by name.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np
import pytest
import torch

from onnx_export import hf
from onnx_export.hf._tasks import VLM_FAMILIES, resolve_task
from onnx_export.hf.export.graphs._qwen_vl import MROPE_FAMILIES
from onnx_export.hf.export.graphs._vlm import VLM_FILES
from onnx_export.hf.runtime._image_processor import ImageProcessor
from tests.hf.torch_free import Call, run_without_torch
from tests.hf.vlm_checkpoints import VLM_CASES

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
PIL = pytest.importorskip("PIL.Image")

_NEW = 8


@dataclasses.dataclass(frozen=True)
class Vlm:
    """A family's eager model and processor, and the folder exported from them."""

    name: str
    model: Any
    processor: Any
    checkpoint: pathlib.Path
    folder: pathlib.Path
    result: hf.ExportedCheckpoint


@pytest.fixture(scope="module", params=list(VLM_CASES))
def vlm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Vlm:
    name = request.param
    root = tmp_path_factory.mktemp(name)
    model, processor = VLM_CASES[name].save(root / "checkpoint")
    result = hf.export_pretrained(root / "checkpoint", root / "onnx")
    return Vlm(name, model, processor, root / "checkpoint", root / "onnx", result)


def _images(*shapes: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(len(shapes))
    return [(rng.random((h, w, 3)) * 255).astype(np.uint8) for h, w in shapes]


def _messages(text: str, images: int = 1) -> list[dict[str, Any]]:
    content = [*({"type": "image"} for _ in range(images)), {"type": "text", "text": text}]
    return [{"role": "user", "content": content}]


def _inputs(vlm: Vlm, texts: list[str], images: list[np.ndarray]) -> Any:
    """The processor's inputs for chat prompts (left-padded), as transformers makes them."""
    prompts = [
        vlm.processor.apply_chat_template(_messages(t), add_generation_prompt=True) for t in texts
    ]
    return vlm.processor(
        images=[[image] for image in images],  # one image per prompt
        text=prompts,
        return_tensors="pt",
        padding=True,
        padding_side="left",
        add_special_tokens=False,
    )


def _images_of(inputs: Any) -> dict[str, np.ndarray]:
    """The processor's ``pixel_values`` (Qwen2-VL's ``image_grid_thw``, Mistral 3's
    ``image_sizes``), for our generate()."""
    names = ("pixel_values", "image_grid_thw", "image_sizes")
    return {name: inputs[name].numpy() for name in names if name in inputs}


def _theirs(vlm: Vlm, inputs: Any, **kwargs: Any) -> np.ndarray:
    with torch.no_grad():
        out = vlm.model.generate(**inputs, max_new_tokens=_NEW, do_sample=False, **kwargs)
    return np.asarray(out.numpy())


def test_export_writes_three_graphs_and_the_processor(vlm: Vlm) -> None:
    assert vlm.result.task == "image-text-to-text"
    assert vlm.result.onnx_files == VLM_FILES
    for name in ("processor_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert name in vlm.result.copied_files, name
    model = hf.OrtModelForImageTextToText.from_pretrained(vlm.folder)
    assert "OrtModelForImageTextToText" in repr(model)
    assert "inputs_embeds" in model.session.input_names


@pytest.mark.parametrize("shape", [(40, 52), (52, 40), (30, 30), (17, 23)], ids=str)
def test_pixel_values_match_the_image_processor(vlm: Vlm, shape: tuple[int, int]) -> None:
    (image,) = _images(shape)
    theirs = vlm.processor.image_processor(image, return_tensors="np")
    expected = theirs["pixel_values"]
    processor = ImageProcessor.from_folder(vlm.folder)
    if processor.patched:  # Qwen2-VL: (patches, patch size) and the grid
        got, grid = processor.patches([PIL.fromarray(image)])
        np.testing.assert_array_equal(grid, theirs["image_grid_thw"])
    else:
        expected = expected.reshape(-1, *expected.shape[-3:])  # Idefics3: (1, images, ...)
        got = processor([PIL.fromarray(image)])
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_greedy_batch_matches_transformers(vlm: Vlm) -> None:
    """Two prompts of different lengths (left-padded), one image each."""
    inputs = _inputs(vlm, ["kalo kami", "posu"], _images((40, 52), (30, 30)))
    assert (inputs["attention_mask"] == 0).any()
    model = hf.OrtModelForImageTextToText.from_pretrained(vlm.folder)
    got = model.generate(
        inputs["input_ids"].numpy(),
        inputs["attention_mask"].numpy(),
        **_images_of(inputs),
        max_new_tokens=_NEW,
    )
    np.testing.assert_array_equal(got, _theirs(vlm, inputs))


def test_beams_and_streaming_match_transformers(vlm: Vlm) -> None:
    inputs = _inputs(vlm, ["kalo kami"], _images((40, 52)))
    model = hf.OrtModelForImageTextToText.from_pretrained(vlm.folder)
    ids, pixels = inputs["input_ids"].numpy(), _images_of(inputs)
    beams = model.generate(ids, **pixels, max_new_tokens=_NEW, num_beams=3, num_return_sequences=2)
    np.testing.assert_array_equal(beams, _theirs(vlm, inputs, num_beams=3, num_return_sequences=2))
    streamed: list[int] = []
    greedy = model.generate(
        ids, **pixels, max_new_tokens=_NEW, streamer=lambda t: streamed.append(int(t[0]))
    )
    np.testing.assert_array_equal(greedy, _theirs(vlm, inputs))
    assert streamed == greedy[0, ids.shape[1] :].tolist()
    sampled = [
        model.generate(ids, **pixels, max_new_tokens=_NEW, do_sample=True, seed=3) for _ in range(2)
    ]
    np.testing.assert_array_equal(sampled[0], sampled[1])


def test_pipeline_matches_transformers(vlm: Vlm) -> None:
    """A PIL image and chat messages, and a plain text placed by the chat template."""
    (image,) = _images((44, 36))
    pipe = hf.pipeline("image-text-to-text", vlm.folder)
    inputs = _inputs(vlm, ["kalo kami"], [image])
    width = inputs["input_ids"].shape[1]
    expected = vlm.processor.decode(_theirs(vlm, inputs)[0, width:], skip_special_tokens=True)
    got = pipe(PIL.fromarray(image), _messages("kalo kami"), max_new_tokens=_NEW)
    assert got == expected
    assert pipe(image, "kalo kami", max_new_tokens=_NEW) == expected
    assert "image-text-to-text" in repr(pipe)


def test_two_images_in_one_prompt_match_transformers(vlm: Vlm) -> None:
    """Qwen2-VL: each image's grid places its M-RoPE positions; logits and tokens."""
    if vlm.name not in MROPE_FAMILIES:
        pytest.skip("M-RoPE families: the grids of several images in one prompt")
    images = _images((40, 52), (17, 33))
    prompt = vlm.processor.apply_chat_template(_messages("kalo", 2), add_generation_prompt=True)
    inputs = vlm.processor(images=[images], text=[prompt], return_tensors="pt")
    model = hf.OrtModelForImageTextToText.from_pretrained(vlm.folder)
    ids = inputs["input_ids"].numpy()
    got = model.generate(ids, **_images_of(inputs), max_new_tokens=_NEW)
    np.testing.assert_array_equal(got, _theirs(vlm, inputs))
    logits = model.logits(ids, **_images_of(inputs))
    with torch.no_grad():
        expected = vlm.model(**inputs).logits.numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(hf.GenerationError, match="image_grid_thw"):
        model.generate(ids, pixel_values=inputs["pixel_values"].numpy(), max_new_tokens=2)


def test_images_of_their_own_sizes_are_cropped_and_checked(vlm: Vlm) -> None:
    """Mistral 3: each image of a padded batch is cropped to its size; too small refused."""
    if vlm.name != "mistral3":
        pytest.skip("the family whose vision encoder takes one image of any size")
    inputs = _inputs(vlm, ["kalo", "posu"], _images((40, 52), (17, 23)))
    model = hf.OrtModelForImageTextToText.from_pretrained(vlm.folder)
    images = _images_of(inputs)
    got = model.image_features(images["pixel_values"], image_sizes=images["image_sizes"])
    with torch.no_grad():
        expected = vlm.model.get_image_features(
            inputs["pixel_values"], inputs["image_sizes"], vision_feature_layer=-1
        ).pooler_output
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(hf.GenerationError, match="at least 16 pixels"):
        model.image_features(np.zeros((1, 3, 8, 48), np.float32))
    with pytest.raises(hf.GenerationError, match="image_sizes"):
        model.image_features(images["pixel_values"], image_sizes=[[40, 48]])


def test_image_tokens_must_match_the_images(vlm: Vlm) -> None:
    inputs = _inputs(vlm, ["kalo"], _images((30, 30)))
    model = hf.OrtModelForImageTextToText.from_pretrained(vlm.folder)
    ids = inputs["input_ids"].numpy()
    one_less = np.delete(ids, int(np.argmax(ids[0] == model.image_token_id)), axis=1)
    with pytest.raises(hf.GenerationError, match="image tokens"):
        model.generate(one_less, **_images_of(inputs), max_new_tokens=2)
    with pytest.raises(hf.GenerationError, match="no pixel_values"):
        model.generate(ids, max_new_tokens=2)
    pipe = hf.pipeline("image-text-to-text", vlm.folder)
    with pytest.raises(hf.GenerationError, match="one placeholder per image"):
        pipe(_images((30, 30), (30, 30)), _messages("kalo"), max_new_tokens=2)


def test_runs_without_torch(vlm: Vlm) -> None:
    images = _images((40, 52))
    inputs = _inputs(vlm, ["kalo kami"], images)
    arrays = {"input_ids": inputs["input_ids"].numpy(), **_images_of(inputs)}
    got = run_without_torch(
        vlm.folder,
        [
            Call("greedy", "generate", arrays, {"max_new_tokens": _NEW}),
            Call(
                "text",
                "pipeline",
                {"image": images[0]},
                {"prompt": "kalo kami", "max_new_tokens": _NEW},
            ),
        ],
    )
    expected = _theirs(vlm, inputs)
    np.testing.assert_array_equal(got["greedy"], expected)
    width = inputs["input_ids"].shape[1]
    assert str(got["text"]) == vlm.processor.decode(expected[0, width:], skip_special_tokens=True)


def test_vlm_checkpoints_resolve_to_the_task(vlm: Vlm) -> None:
    config = vlm.model.config
    architectures = (type(vlm.model).__name__,)
    assert resolve_task(config.model_type, architectures, None) == "image-text-to-text"
    assert resolve_task(config.model_type, (), None) == "image-text-to-text"
    assert resolve_task(config.model_type, architectures, "vlm") == "image-text-to-text"


@pytest.mark.parametrize(
    ("model_type", "architecture", "other"),
    [
        ("qwen3_vl", "Qwen3VLForConditionalGeneration", "feature-extraction"),
        ("gemma3n", "Gemma3nForConditionalGeneration", "text-generation"),
        ("paligemma", "PaliGemmaForConditionalGeneration", None),
    ],
)
def test_other_families_are_refused_by_name(
    model_type: str, architecture: str, other: str | None
) -> None:
    with pytest.raises(hf.CheckpointError) as info:
        resolve_task(model_type, (architecture,), None)
    message = str(info.value)
    assert model_type in message and "image-text-to-text" in message
    assert all(family in message for family in VLM_FAMILIES)
    if other is not None:
        assert other in message


def test_fused_target_is_refused(vlm: Vlm, tmp_path: pathlib.Path) -> None:
    with pytest.raises(hf.CheckpointError, match="inputs_embeds"):
        hf.export_pretrained(vlm.checkpoint, tmp_path / "out", target="onnxruntime")


def test_cli_refuses_a_family_it_cannot_export(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx_export.cli import main

    (tmp_path / "qwen").mkdir()
    config = {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"]}
    (tmp_path / "qwen" / "config.json").write_text(json.dumps(config))
    argv = ["hf", str(tmp_path / "qwen"), "-o", str(tmp_path / "out")]
    assert main([*argv, "--task", "image-text-to-text"]) == 2
    err = capsys.readouterr().err
    assert "qwen3_vl" in err and "llava" in err and "qwen2_vl" in err


def test_float16_export_matches_eager_logits(vlm: Vlm, tmp_path: pathlib.Path) -> None:
    """A float16 folder: the vision encoder takes float16 pixels, logits near eager's."""
    if vlm.name != "llava":
        pytest.skip("one family is enough for the half-precision path")
    hf.export_pretrained(vlm.checkpoint, tmp_path / "f16", dtype="float16")
    model = hf.OrtModelForImageTextToText.from_pretrained(tmp_path / "f16")
    inputs = _inputs(vlm, ["kalo kami"], _images((40, 52)))
    got = model.logits(inputs["input_ids"].numpy(), pixel_values=inputs["pixel_values"].numpy())
    with torch.no_grad():
        expected = vlm.model(**inputs).logits.numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2)
