"""``onnx-export hf`` on the installed transformers, whichever release it is (#41).

A tiny Llama, Qwen2, Mixtral, GPT-2, T5 and ViT checkpoint is saved by the installed
release, exported from the command line, and run without torch: the greedy tokens equal
that release's ``generate()`` (ViT: the logits equal its forward). CI runs this file on the
newest transformers and again on the floor ``pyproject.toml`` admits (``.ci/run``), so the
floor's command-line path is proven, not assumed.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import types

import pytest
import transformers

from tests.hf.checkpoints import CASES
from tests.hf.conftest import Exported
from tests.hf.test_hf_parity import _CHECKS

ARCHITECTURES = ("llama", "qwen2", "mixtral", "gpt2", "t5", "vit")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_cli_export_of_a_checkpoint_saved_by_the_installed_release(
    name: str, tmp_path: pathlib.Path
) -> None:
    case = CASES[name]
    built = case.save(tmp_path / "ckpt", seed=3)
    # The eager reference is the checkpoint as this release loads it, as a user's would be.
    model = type(built).from_pretrained(tmp_path / "ckpt").eval()
    done = subprocess.run(
        [sys.executable, "-m", "onnx_export", "hf", "ckpt", "-o", "out"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"transformers {transformers.__version__}: {done.stderr}"
    assert f"Exported {name} for {case.task} to" in done.stdout
    result = types.SimpleNamespace(task=case.task)  # what the checks read of the result
    exported = Exported(name, model, tmp_path / "ckpt", tmp_path / "out", result)  # type: ignore[arg-type]
    _CHECKS[case.task](exported)
