"""Every task beyond generation end to end: a tiny checkpoint folder, ``export_pretrained``
(the task inferred from config.json), then the ``OrtModelFor<Task>`` class in a process
where torch cannot be imported, compared output by output with eager transformers on
inputs of other batch and sequence sizes than the export's examples.

CI runs one model per task and per family (``task_cases.CI``); ``--runslow`` (or
``ONNX_EXPORT_RUNSLOW=1``) runs every case. Also: the architecture table is current, and
a refusal happens before torch or transformers is imported.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from onnx_export import hf
from onnx_export.hf._architectures import TABLE
from tests.hf.task_cases import CI, TASK_CASES
from tests.hf.task_inputs import eager_outputs, numpy_inputs, pixels, task_inputs
from tests.hf.torch_free import Call, run_without_torch

_ROOT = pathlib.Path(__file__).resolve().parents[2]
# Tasks a bare model's config.json cannot say: passed explicitly.
_EXPLICIT = ("sentence-similarity",)


def _skip_unless_slow(request: pytest.FixtureRequest, name: str) -> None:
    if name in CI:
        return
    if not request.config.getoption("--runslow", default=False) and (
        os.environ.get("ONNX_EXPORT_RUNSLOW") != "1"
    ):
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")


def _image_to_text(model: object, folder: pathlib.Path) -> None:
    images = pixels(model.config, 2)  # type: ignore[attr-defined]
    got = run_without_torch(
        folder,
        [Call("greedy", "generate", {"pixel_values": images.numpy()}, {"max_new_tokens": 8})],
    )
    with torch.no_grad():
        expected = model.generate(  # type: ignore[attr-defined]
            pixel_values=images, max_new_tokens=8, do_sample=False
        )
    np.testing.assert_array_equal(got["greedy"], expected.numpy())


@pytest.mark.parametrize("name", list(TASK_CASES))
def test_task_matches_eager_without_torch(
    name: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    _skip_unless_slow(request, name)
    case = TASK_CASES[name]
    model = case.save(tmp_path / "checkpoint")
    task = case.task if case.task in _EXPLICIT else None
    result = hf.export_pretrained(tmp_path / "checkpoint", tmp_path / "onnx", task=task)
    assert result.task == case.task
    if case.task == "image-to-text":
        _image_to_text(model, tmp_path / "onnx")
        return
    inputs = task_inputs(case, model)
    want = eager_outputs(case, model, inputs)
    got = run_without_torch(tmp_path / "onnx", [Call("out", "outputs", numpy_inputs(inputs))])
    assert sorted(got) == sorted(f"out.{k}" for k in want)
    for key, value in want.items():
        np.testing.assert_allclose(got[f"out.{key}"], value, rtol=1e-3, atol=1e-4, err_msg=key)


def test_architecture_table_is_current() -> None:
    """``onnx_export/hf/_architectures.py`` is what transformers' Auto mappings say now."""
    import transformers

    from tests.hf.make_architectures import build

    if transformers.__version__ != TABLE["transformers_version"]:
        pytest.skip(f"the table is for transformers {TABLE['transformers_version']}")
    assert build() == TABLE, "stale: run python -m tests.hf.make_architectures"


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}, "recurrent"),
        ({"model_type": "longformer"}, "sizes views from tensor values"),
        ({"model_type": "bert", "architectures": ["BertLMHeadModel"]}, "is_decoder=true"),
        ({"model_type": "vit"}, "does not fit"),
    ],
    ids=["mamba", "longformer", "bert-as-decoder", "vit-text-generation"],
)
def test_refused_before_torch_is_imported(
    config: dict[str, object], fragment: str, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    argv = ["hf", str(tmp_path / "ckpt"), "-o", str(tmp_path / "out")]
    if config["model_type"] == "vit":
        argv += ["--task", "text-generation"]
    script = (
        "import sys\nfrom onnx_export.cli import main\n"
        f"rc = main({argv!r})\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "print(rc, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=_ROOT, check=False
    )
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert fragment in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_docs_page_is_current() -> None:
    """``docs/huggingface-architectures.md`` lists every tested architecture/task pair."""
    from tests.hf.make_architecture_docs import PAGE, text

    assert PAGE.read_text(encoding="utf-8") == text(), (
        "stale: run python -m tests.hf.make_architecture_docs"
    )
