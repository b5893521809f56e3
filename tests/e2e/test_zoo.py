"""The model zoo, end to end: export, run in ONNX Runtime, compare with eager PyTorch.

Every model is exported with grad mode on and off (torch.export traces differently
under ``no_grad``), with static shapes and with dynamic dims; dynamic exports are also
run at other sizes. CI runs the ``small`` tier; the full zoo runs with ``--runslow`` or
``ONNX_EXPORT_RUNSLOW=1`` (and side by side with torch.onnx in ``bench/bench_zoo.py``).
The small tier is also exported at opset 13 (dynamic, no grad); every model at 13, 14 and
15 is slow (side by side with torch.onnx in ``bench/bench_opsets.py``).
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.zoo_models import ZOO, check

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

pytest.importorskip("transformers")

SMALL = [name for name, entry in ZOO.items() if entry.tier == "small"]
FULL = [name for name, entry in ZOO.items() if entry.tier == "full"]
CASES = [
    pytest.param(
        dynamic, grad, id=f"{'dynamic' if dynamic else 'static'}-{'grad' if grad else 'no_grad'}"
    )
    for dynamic in (False, True)
    for grad in (True, False)
]


def _run(name: str, dynamic: bool, grad: bool) -> None:
    result = check("ours", ZOO[name], dynamic=dynamic, grad=grad)
    assert result.status == "pass", result.reason


@pytest.mark.parametrize(("dynamic", "grad"), CASES)
@pytest.mark.parametrize("name", SMALL)
def test_zoo_small(name: str, dynamic: bool, grad: bool) -> None:
    _run(name, dynamic, grad)


@pytest.mark.slow
@pytest.mark.parametrize(("dynamic", "grad"), CASES)
@pytest.mark.parametrize("name", FULL)
def test_zoo_full(name: str, dynamic: bool, grad: bool, request: pytest.FixtureRequest) -> None:
    run_slow = request.config.getoption("--runslow", default=False)
    if not run_slow and os.environ.get("ONNX_EXPORT_RUNSLOW") != "1":
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")
    _run(name, dynamic, grad)


def _run_at(name: str, opset: int) -> None:
    result = check("ours", ZOO[name], dynamic=True, grad=False, opset=opset)
    assert result.status == "pass", result.reason
    assert result.opset == opset, f"asked for opset {opset}, the file declares {result.opset}"


@pytest.mark.parametrize("name", SMALL)
def test_zoo_small_at_opset_13(name: str) -> None:
    """Opset 13 (the oldest): dynamic dims, run at every size, the file declares 13."""
    _run_at(name, 13)


@pytest.mark.slow
@pytest.mark.parametrize("opset", [13, 14, 15], ids=lambda o: f"opset{o}")
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_at_older_opsets(name: str, opset: int, request: pytest.FixtureRequest) -> None:
    run_slow = request.config.getoption("--runslow", default=False)
    if not run_slow and os.environ.get("ONNX_EXPORT_RUNSLOW") != "1":
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")
    _run_at(name, opset)


def test_zoo_covers_the_required_families() -> None:
    required = {
        "bert", "deberta", "gpt2", "llama", "qwen2", "mistral", "gemma", "phi", "mixtral_moe",
        "t5", "bart", "vit", "swin", "convnext", "resnet", "clip_vision", "whisper_encoder",
        "wav2vec2", "llama_dynamic_cache", "lstm", "gru", "transformer_encoder",
        "multihead_attention", "hooks", "checkpoint", "ema_averaged_model", "torch_cond",
        "buffer_update",
    }  # fmt: skip
    assert required <= set(ZOO), required - set(ZOO)
