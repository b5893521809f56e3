"""``onnx-export hf``: a checkpoint folder exported from the command line, then generated
from without torch; bad folders, tasks and options exit 2 with one line on stderr."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
import transformers as tf

from onnx_export.cli import main
from tests.hf.checkpoints import CASES
from tests.hf.torch_free import Call, run_without_torch

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("opset", [18, 13], ids=["opset18", "opset13"])
def test_cli_export_then_generate_without_torch(tmp_path: pathlib.Path, opset: int) -> None:
    """A bfloat16 checkpoint (as many are published) is exported in float32.

    At opset 13 too (older runtimes): the graphs declare 13 and generate the same tokens.
    """
    torch.manual_seed(1)
    CASES["gpt2"].build().to(torch.bfloat16).save_pretrained(tmp_path / "ckpt")
    model = tf.GPT2LMHeadModel.from_pretrained(tmp_path / "ckpt", dtype=torch.float32).eval()
    done = subprocess.run(
        [sys.executable, "-m", "onnx_export", "hf", "ckpt", "-o", "out", "--opset", str(opset)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Exported gpt2 for text-generation to" in done.stdout
    for graph in (tmp_path / "out").glob("*.onnx"):
        imports = onnx.load(graph, load_external_data=False).opset_import
        assert [o.version for o in imports if o.domain in ("", "ai.onnx")] == [opset]
    ids = torch.tensor([[0, 0, 7, 8, 9], [10, 11, 12, 13, 14]])
    mask = (ids != 0).long()
    got = run_without_torch(
        tmp_path / "out",
        [
            Call(
                "greedy",
                "generate",
                {"input_ids": ids.numpy(), "attention_mask": mask.numpy()},
                {"max_new_tokens": 20},
            )
        ],
    )
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False)
    np.testing.assert_array_equal(got["greedy"], expected.numpy())


def _bert_config(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir()
    tf.BertConfig(architectures=["BertModel"]).to_json_file(folder / "config.json")
    return folder


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["hf", "nowhere", "-o", "out"], "'nowhere' does not exist"),
        (["hf", "bert", "-o", "out", "--task", "depth-estimation"], "does not fit"),
        (["hf", "bert", "-o", "out", "--opset", "7"], "supported opsets"),
        (["hf", "bert", "-o", "out", "--task", "chat"], "invalid choice: 'chat'"),
        (["hf", "empty", "-o", "out"], "config.json' is missing"),
    ],
    ids=["missing", "task-mismatch", "opset", "unknown-task", "no-config"],
)
def test_cli_bad_input_exits_2(
    argv: list[str],
    fragment: str,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _bert_config(tmp_path / "bert")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_target_onnxruntime_needs_an_exporter_that_has_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx_export._options import ExportOptions

    if "target" in {f.name for f in dataclasses.fields(ExportOptions)}:
        pytest.skip("this exporter has ExportOptions.target: --target passes through")
    _bert_config(tmp_path / "bert")
    assert main(["hf", str(tmp_path / "bert"), "-o", str(tmp_path / "out"), "--target",
                 "onnxruntime"]) == 2  # fmt: skip
    assert "target='onnxruntime' is not available" in capsys.readouterr().err


def test_export_from_a_loaded_model(tmp_path: pathlib.Path) -> None:
    """A model object instead of a folder: its config is written, and the manifest."""
    from onnx_export import hf

    model = CASES["bert"].build().eval()
    result = hf.export_pretrained(model, tmp_path / "out", task="feature-extraction")
    manifest = json.loads((tmp_path / "out" / "onnx_export.json").read_text())
    assert manifest == {
        "task": "feature-extraction",
        "model_type": "bert",
        "onnx_files": ["model.onnx"],
    }
    assert result.copied_files == ("config.json",)  # BertModel cannot generate
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "bert"
