"""Bad input to the Hugging Face export and runtime: each a specific error naming the file or
value; a failed export leaves the output folder as it was."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import transformers as tf

from onnx_export import hf
from onnx_export.hf.export import _export
from tests.hf.conftest import Exported


def _config_only(folder: pathlib.Path, config: Any) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    config.to_json_file(folder / "config.json")
    return folder


def test_folder_without_config(tmp_path: pathlib.Path) -> None:
    with pytest.raises(hf.CheckpointError, match=r"config\.json.*is missing"):
        hf.export_pretrained(tmp_path, tmp_path / "out")


def test_missing_folder(tmp_path: pathlib.Path) -> None:
    with pytest.raises(hf.CheckpointError, match="does not exist"):
        hf.export_pretrained(tmp_path / "nowhere", tmp_path / "out")


def test_unsupported_architecture(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(hf.CheckpointError, match=r"'mamba' cannot be exported for 'text-gen.*rec"):
        hf.export_pretrained(folder, tmp_path / "out")


def test_unknown_architecture(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "no_such_model"}))
    with pytest.raises(hf.CheckpointError, match=r"'no_such_model'.*not in transformers.*--task"):
        hf.export_pretrained(folder, tmp_path / "out")


def test_task_that_does_not_fit(tmp_path: pathlib.Path) -> None:
    folder = _config_only(tmp_path / "bert", tf.BertConfig())
    with pytest.raises(hf.CheckpointError, match=r"'bert'.*'text-generation'.*is_decoder=true"):
        hf.export_pretrained(folder, tmp_path / "out", task="text-generation")
    with pytest.raises(hf.CheckpointError, match=r"'object-detection' does not fit.*'bert'"):
        hf.export_pretrained(folder, tmp_path / "out", task="object-detection")


def test_unknown_task(tmp_path: pathlib.Path) -> None:
    folder = _config_only(tmp_path / "bert", tf.BertConfig())
    with pytest.raises(hf.CheckpointError, match="Unknown task 'summarize'"):
        hf.export_pretrained(folder, tmp_path / "out", task="summarize")


def test_config_without_weights(tmp_path: pathlib.Path) -> None:
    folder = _config_only(tmp_path / "bert", tf.BertConfig(architectures=["BertModel"]))
    with pytest.raises(hf.CheckpointError, match="could not load"):
        hf.export_pretrained(folder, tmp_path / "out")


def test_failed_export_leaves_output_as_it_was(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _config_only(tmp_path / "bert", tf.BertConfig(num_hidden_layers=1))
    monkeypatch.setattr(_export, "_load_model", lambda *_: tf.BertModel(tf.BertConfig()))

    def half_written(model: Any, task: str, staged: pathlib.Path, *args: Any) -> list[str]:
        (staged / "model.onnx").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(_export, "_write_graphs", half_written)
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").write_text("earlier")
    (out / "onnx_export.json").write_text("{}")  # an earlier export: the one kind replaced
    with pytest.raises(OSError, match="disk full"):
        hf.export_pretrained(folder, out)
    assert (out / "model.onnx").read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert", "out"]  # no temp folder left


@pytest.mark.parametrize(
    "where",
    ["checkpoint", "parent", "other-files", "a-file"],
)
def test_an_output_whose_replacement_would_lose_files_is_refused_first(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    folder = _config_only(tmp_path / "bert", tf.BertConfig(architectures=["BertModel"]))
    (folder / "model.safetensors").write_bytes(b"weights")
    loads: list[str] = []
    monkeypatch.setattr(_export, "_load_model", lambda path, task: loads.append(task))
    out = {"checkpoint": folder, "parent": tmp_path, "other-files": tmp_path / "mine"}.get(
        where, tmp_path / "notes.txt"
    )
    if where == "other-files":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    elif where == "a-file":
        out.write_text("keep me")
    with pytest.raises(hf.CheckpointError, match=str(out.name)):
        hf.export_pretrained(folder, out)
    assert not loads  # refused before any work
    assert (folder / "model.safetensors").read_bytes() == b"weights"
    if where in ("other-files", "a-file"):
        kept = out / "notes.txt" if where == "other-files" else out
        assert kept.read_text() == "keep me"


def test_prompt_longer_than_max_positions(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    with pytest.raises(hf.GenerationError, match="prompt length is 65, over the model's 64"):
        model.generate(np.ones((1, 65), np.int64), max_new_tokens=1)
    with pytest.raises(hf.GenerationError, match=r"plus max_new_tokens is 70.*Lower max_new"):
        model.generate(np.ones((1, 60), np.int64), max_new_tokens=10)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"input_ids": np.ones((2, 3, 4), np.int64)}, "must be (batch, length)"),
        ({"input_ids": np.ones((1, 3), np.float32)}, "integer token ids"),
        ({"input_ids": [[1, 2]], "attention_mask": [[1, 1, 1]]}, "attention_mask has shape"),
        ({"input_ids": [[1, 2]], "max_new_tokens": 0}, "max_new_tokens must be an int >= 1"),
        ({"input_ids": [[1, 2]], "max_new_tokens": None, "max_length": 2}, "no room for new"),
        ({"input_ids": [[1, 2]], "max_new_tokens": True}, "max_new_tokens must be an int >= 1"),
        ({"input_ids": [[1, 2]], "eos_token_id": "2"}, "a token id or a list of token ids"),
        ({"input_ids": [[1, 2]], "do_sample": True, "top_p": 1.5}, "top_p must be in (0, 1]"),
    ],
    ids=[
        "3d-ids",
        "float-ids",
        "mask-shape",
        "zero-new",
        "short-max-length",
        "bool-new",
        "str-eos",
        "top-p",
    ],
)
def test_bad_generate_arguments(
    exported: Callable[[str], Exported], kwargs: dict[str, Any], words: str
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    with pytest.raises(hf.GenerationError) as caught:
        model.generate(**{"max_new_tokens": 2, **kwargs})
    assert words in str(caught.value)


def test_runtime_refuses_another_task(exported: Callable[[str], Exported]) -> None:
    with pytest.raises(hf.CheckpointError, match="task 'feature-extraction'"):
        hf.OrtModelForCausalLM.from_pretrained(exported("bert").folder)


def test_runtime_refuses_a_folder_without_manifest(tmp_path: pathlib.Path) -> None:
    with pytest.raises(hf.CheckpointError, match=r"onnx_export\.json.*is missing"):
        hf.OrtModelForSeq2SeqLM.from_pretrained(tmp_path)


def test_speech_model_needs_features(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForSeq2SeqLM.from_pretrained(exported("whisper").folder)
    with pytest.raises(hf.GenerationError, match="pass input_features"):
        model.generate([[1, 2]], max_new_tokens=2)
    with pytest.raises(hf.GenerationError, match=r"input_features has shape \(1, 16, 30\)"):
        model.generate(input_features=np.zeros((1, 16, 30), np.float32), max_new_tokens=2)


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ({"input_ids": [[1, 2, 10**6]]}, "token ids [1000000] outside the model's vocabulary"),
        ({"input_ids": [[1.5, 2.0]]}, "input_ids: expected integers (int64), got float64"),
        (
            {"input_ids": [1, 2, 3]},
            "expected 2 dimensions [batch, sequence_length], got shape (3,)",
        ),
        ({"input_ids": [[1, 2], [3]]}, "input_ids: expected a rectangular array"),
        ({"input_ids": [[1, 2]], "attention_mask": [[1.0, 1.0]]}, "attention_mask: expected"),
    ],
    ids=["out-of-vocab", "floats", "one-row", "ragged", "float-mask"],
)
def test_task_runtime_refuses_bad_inputs_before_onnxruntime(
    exported: Callable[[str], Exported], inputs: dict[str, Any], words: str
) -> None:
    """A wrong call to an ``OrtModelFor<Task>`` is a GenerationError, never ORT's own error."""
    model = hf.OrtModelForFeatureExtraction.from_pretrained(exported("bert").folder)
    with pytest.raises(hf.GenerationError) as caught:
        model(**inputs)
    assert words in str(caught.value), caught.value
    assert model(input_ids=[[1, 2, 3]]).last_hidden_state.shape[:2] == (1, 3)
