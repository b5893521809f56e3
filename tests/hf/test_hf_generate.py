"""Generation options of the runtime: EOS stops rows as transformers stops them, sampling is
reproducible with a seed, top-k of 1 is greedy; the folder is self-contained."""

from __future__ import annotations

import dataclasses
import inspect
import os
import pathlib
from collections.abc import Callable

import numpy as np
import pytest
import torch

from onnx_export import hf
from tests.hf.checkpoints import CASES
from tests.hf.conftest import Exported


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(2, 90, (2, 6), generator=torch.Generator().manual_seed(11))
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0
    return ids, mask


def test_eos_stops_rows_like_transformers(exported: Callable[[str], Exported]) -> None:
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ids, mask = _prompts()
    greedy = model.generate(ids.numpy(), mask.numpy(), max_new_tokens=12)
    eos = int(greedy[0, ids.shape[1] + 3])  # row 0 ends after its 4th new token
    ours = model.generate(ids.numpy(), mask.numpy(), max_new_tokens=12, eos_token_id=eos)
    with torch.no_grad():
        theirs = case.model.generate(
            ids, attention_mask=mask, max_new_tokens=12, eos_token_id=eos, pad_token_id=0
        )
    ours_padded = model.generate(
        ids.numpy(), mask.numpy(), max_new_tokens=12, eos_token_id=eos, pad_token_id=0
    )
    np.testing.assert_array_equal(ours_padded, theirs.numpy())
    assert ours[0, ids.shape[1] + 3] == eos
    assert (ours[0, ids.shape[1] + 4 :] == 0).all()  # then the config's pad_token_id


def test_all_rows_ended_stops_early(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    prompt = np.array([[5, 6, 7]], np.int64)
    first = int(model.generate(prompt, max_new_tokens=1)[0, -1])
    assert model.generate(prompt, max_new_tokens=10, eos_token_id=first).shape == (1, 4)


def test_sampling_is_reproducible_with_a_seed(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    ids, mask = _prompts()
    kwargs = {"max_new_tokens": 16, "do_sample": True, "temperature": 1.5, "top_p": 0.95}
    first = model.generate(ids.numpy(), mask.numpy(), seed=3, **kwargs)
    again = model.generate(ids.numpy(), mask.numpy(), seed=3, **kwargs)
    other = model.generate(ids.numpy(), mask.numpy(), seed=4, **kwargs)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    top1 = model.generate(ids.numpy(), mask.numpy(), max_new_tokens=16, do_sample=True, top_k=1)
    np.testing.assert_array_equal(
        top1, model.generate(ids.numpy(), mask.numpy(), max_new_tokens=16)
    )


def test_folder_is_self_contained(exported: Callable[[str], Exported]) -> None:
    case = exported("llama")
    names = sorted(p.name for p in case.folder.iterdir())
    assert names == ["config.json", "generation_config.json", "model.onnx", "onnx_export.json"]
    assert case.result.copied_files == ("config.json", "generation_config.json")


def test_decoder_inputs_and_outputs_are_named_for_onnxruntime(
    exported: Callable[[str], Exported],
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    inputs = {i.name: i.shape for i in model.session.session.get_inputs()}
    outputs = {o.name: o.shape for o in model.session.session.get_outputs()}
    assert list(inputs)[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert inputs["past_key_values.1.value"][2] == "past_sequence_length"
    assert list(outputs) == ["logits"] + [
        f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")
    ]


@pytest.mark.parametrize("name", hf.__all__)
def test_public_names_are_documented(name: str) -> None:
    obj = getattr(hf, name)
    if not callable(obj):
        return
    doc = inspect.getdoc(obj) or ""
    assert "Example" in doc, f"{name} has no Example section"
    members = (
        [obj]
        if not inspect.isclass(obj)
        else [m for k, m in vars(obj).items() if callable(m) and not k.startswith("_")]
    )
    for member in members:
        function = getattr(member, "__func__", member)
        hints = inspect.get_annotations(function)
        assert "return" in hints, f"{name}.{function.__name__} lacks a return annotation"


def test_target_onnxruntime_generates_the_same_tokens(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """``target="onnxruntime"`` (fused com.microsoft ops) keeps greedy parity (slow)."""
    from onnx_export._options import ExportOptions

    if "target" not in {f.name for f in dataclasses.fields(ExportOptions)}:
        pytest.skip("this exporter has no ExportOptions.target")
    if not request.config.getoption("--runslow", default=False) and (
        os.environ.get("ONNX_EXPORT_RUNSLOW") != "1"
    ):
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")
    model = CASES["llama"].save(tmp_path / "ckpt")
    hf.export_pretrained(tmp_path / "ckpt", tmp_path / "out", target="onnxruntime")
    ort_model = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "out")
    ids, mask = _prompts()
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False)
    got = ort_model.generate(ids.numpy(), mask.numpy(), max_new_tokens=20)
    np.testing.assert_array_equal(got, expected.numpy())


def test_max_length_and_the_default_length_as_transformers(
    exported: Callable[[str], Exported],
) -> None:
    """``max_length`` counts the prompt; with neither, generation_config's (20 by default)."""
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ids, mask = _prompts()
    ours = model.generate(ids.numpy(), mask.numpy(), max_length=11, pad_token_id=0)
    with torch.no_grad():
        theirs = case.model.generate(ids, attention_mask=mask, max_length=11, pad_token_id=0)
    np.testing.assert_array_equal(ours, theirs.numpy())
    assert ours.shape == (2, 11)
    both = model.generate(ids.numpy(), mask.numpy(), max_length=11, max_new_tokens=2)
    assert both.shape == (2, 8)  # max_new_tokens wins, as in transformers
    default = model.generate(ids.numpy(), mask.numpy(), pad_token_id=0)
    with torch.no_grad():
        expected = case.model.generate(ids, attention_mask=mask, pad_token_id=0)
    np.testing.assert_array_equal(default, expected.numpy())
    streamed = list(model.stream(ids.numpy(), mask.numpy(), max_length=9))
    assert len(streamed) <= 3
    with pytest.raises(hf.GenerationError, match=r"no room for new tokens.*max_new_tokens=N"):
        model.generate(ids.numpy(), mask.numpy(), max_length=6)


def test_seq2seq_max_length_counts_the_decoder_start(exported: Callable[[str], Exported]) -> None:
    case = exported("t5")
    model = hf.OrtModelForSeq2SeqLM.from_pretrained(case.folder)
    ids = torch.randint(3, 90, (1, 7), generator=torch.Generator().manual_seed(2))
    ours = model.generate(ids.numpy(), max_length=6)
    with torch.no_grad():
        theirs = case.model.generate(ids, max_length=6)
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_a_task_model_takes_its_inputs_by_position(exported: Callable[[str], Exported]) -> None:
    """``model(ids, mask)`` as transformers' ``forward``: the graph's inputs in order."""
    model = hf.OrtModelForFeatureExtraction.from_pretrained(exported("bert").folder)
    ids, mask = _prompts()
    by_name = model(input_ids=ids.numpy(), attention_mask=mask.numpy())
    by_position = model(ids.numpy(), mask.numpy())
    name = model.output_names[0]
    np.testing.assert_array_equal(by_position[name], by_name[name])
    with pytest.raises(hf.GenerationError, match="both by position and by name"):
        model(ids.numpy(), input_ids=ids.numpy())
    with pytest.raises(hf.GenerationError, match="positional arguments"):
        model(*([ids.numpy()] * (len(model.input_names) + 1)))


def test_a_causal_lm_is_called_as_transformers_calls_it(
    exported: Callable[[str], Exported],
) -> None:
    """``model(ids, mask).logits``: the prompt's logits, as transformers' forward gives them."""
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ids, mask = _prompts()
    ours = model(ids.numpy(), mask.numpy())
    with torch.no_grad():
        theirs = case.model(ids, attention_mask=mask).logits
    keep = mask.numpy().astype(bool)  # padded positions' logits are not compared
    np.testing.assert_allclose(ours.logits[keep], theirs.numpy()[keep], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ours["logits"], model.logits(ids.numpy(), mask.numpy()))
