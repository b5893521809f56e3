"""transformers models called the usual way: the cache they return is part of the output.

``LlamaForCausalLM(cfg)(input_ids)`` returns a ``DynamicCache`` (``use_cache`` defaults to
True); T5, BART and Whisper return an ``EncoderDecoderCache``. Each model is exported
static and with dynamic (batch, sequence), run in ONNX Runtime at two sizes and compared
with eager (logits and every cache tensor). One test does it in a fresh process, where no
earlier export or call has registered a cache class.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import onnx_export
from tests.e2e.zoo_models import small_config, small_decoder_config
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")

transformers = pytest.importorskip("transformers")

_SEQ2SEQ_IDS = {
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
}


def _decoder(config: str, model: str, **extra: Any) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        cfg = small_decoder_config(config, **{"num_key_value_heads": 2, **extra})
        return getattr(transformers, model)(cfg).eval()  # type: ignore[no-any-return]

    return make


def _gpt2() -> torch.nn.Module:
    cfg = small_config("gpt2", bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _t5() -> torch.nn.Module:
    cfg = small_config("t5")
    return transformers.T5ForConditionalGeneration(cfg).eval()


def _bart() -> torch.nn.Module:
    cfg = small_config("bart", **_SEQ2SEQ_IDS)
    return transformers.BartForConditionalGeneration(cfg).eval()


def _whisper() -> torch.nn.Module:
    cfg = small_config(
        "whisper", **_SEQ2SEQ_IDS, num_mel_bins=8, max_target_positions=32,
        suppress_tokens=[], begin_suppress_tokens=[],
    )  # fmt: skip
    return transformers.WhisperForConditionalGeneration(cfg).eval()


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "llama": _decoder("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": _decoder("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": _decoder("MistralConfig", "MistralForCausalLM"),
    "phi3": _decoder("Phi3Config", "Phi3ForCausalLM", pad_token_id=0, eos_token_id=0),
    "gemma": _decoder("GemmaConfig", "GemmaForCausalLM", head_dim=8),
    "gpt2": _gpt2,
    "t5": _t5,
    "bart": _bart,
    "whisper": _whisper,
}
SEQ2SEQ = ("t5", "bart", "whisper")


def inputs(name: str, batch: int, seq: int, mask: bool, seed: int = 0) -> dict[str, Any]:
    """The usual call of each model: token ids (and a mask), or audio features."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (batch, seq), generator=g)
    if name == "whisper":
        return {"input_features": torch.randn(batch, 8, 32, generator=g), "decoder_input_ids": ids}
    call: dict[str, Any] = {"input_ids": ids}
    if mask:
        call["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
    if name in SEQ2SEQ:
        call["decoder_input_ids"] = torch.randint(3, 100, (batch, seq - 1), generator=g)
    return call


def shapes(name: str, mask: bool) -> dict[str, Any]:
    """(batch, sequence) dynamic on every input of the usual call."""
    if name == "whisper":
        return {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "seq"}}
    out: dict[str, Any] = {"input_ids": {0: "batch", 1: "seq"}}
    if mask:
        out["attention_mask"] = {0: "batch", 1: "seq"}
    if name in SEQ2SEQ:
        out["decoder_input_ids"] = {0: "batch", 1: "target"}
    return out


def check(name: str, dynamic: bool, mask: bool) -> onnx_export.ONNXProgram:
    """Export ``name`` called the usual way; compare with eager at the export size and another."""
    torch.manual_seed(0)
    model = MODELS[name]()
    options = onnx_export.ExportOptions(dynamic_shapes=shapes(name, mask) if dynamic else None)
    program = onnx_export.dynamo_export(model, **inputs(name, 2, 6, mask), export_options=options)
    sizes = [(2, 6, 1), (3, 4, 2)] if dynamic else [(2, 6, 1)]
    for batch, seq, seed in sizes:
        diffs = assert_onnx_program_close(
            program, model, **inputs(name, batch, seq, mask, seed), atol=1e-4, rtol=1e-3
        )
        assert len(diffs) > 1  # logits and the cache's tensors
    return program


def test_decoder_returns_its_cache_static_and_dynamic() -> None:
    for dynamic in (False, True):
        program = check("llama", dynamic, mask=False)
        names = [v.name for v in program.model.graph.outputs]
        assert names[0] == "logits"
        assert "cache.key_cache.1" in names and "cache.value_cache.0" in names
    out = program(**inputs("llama", 1, 3, mask=False))
    assert isinstance(out.cache, transformers.DynamicCache)


def test_encoder_decoder_cache_with_mask_and_load(tmp_path: Path) -> None:
    program = check("bart", dynamic=True, mask=True)
    out = program(**inputs("bart", 2, 5, mask=True))
    assert isinstance(out.cache, transformers.EncoderDecoderCache)
    program.save(tmp_path / "bart.onnx")
    loaded = onnx_export.load(tmp_path / "bart.onnx")(**inputs("bart", 2, 5, mask=True))
    assert isinstance(loaded, dict) and "logits" in loaded and "cache" in loaded
    torch.testing.assert_close(loaded["logits"], out.logits)
    # Without the class in allowed_classes, the cache comes back by its attribute names.
    layer = loaded["cache"]["self_attention_cache"]["layers"][1]
    torch.testing.assert_close(layer["values"], out.cache.self_attention_cache.layers[1].values)
    cross = loaded["cache"]["cross_attention_cache"]["layers"][0]["keys"]
    torch.testing.assert_close(cross, out.cache.cross_attention_cache.layers[0].keys)


def test_cache_passed_through_kwargs_is_dynamic_by_path() -> None:
    """``past_key_values=`` reaches ``forward`` through ``**kwargs``; its leaves go by path."""
    torch.manual_seed(0)
    model = MODELS["llama"]()

    def cache(batch: int, past: int) -> Any:
        made = transformers.DynamicCache()
        for layer in range(2):
            made.update(torch.randn(batch, 2, past, 8), torch.randn(batch, 2, past, 8), layer)
        return made

    dims: dict[str, Any] = {"input_ids": {0: "batch", 1: "seq"}}
    dims["attention_mask"] = {0: "batch", 1: "total"}
    for kind in ("key_cache", "value_cache"):
        for layer in range(2):
            dims[f"past_key_values.{kind}.{layer}"] = {0: "batch", 2: "past"}
    program = onnx_export.dynamo_export(
        model, torch.randint(0, 100, (2, 3)), attention_mask=torch.ones(2, 7, dtype=torch.long),
        past_key_values=cache(2, 4), export_options=onnx_export.ExportOptions(dynamic_shapes=dims),
    )  # fmt: skip
    value = program.model.graph.inputs[2]
    assert value.name == "past_key_values.key_cache.0"
    assert [str(d) for d in value.shape or ()] == ["batch", "2", "past", "8"]
    assert_onnx_program_close(
        program, model, torch.randint(0, 100, (3, 2)),
        attention_mask=torch.ones(3, 7, dtype=torch.long), past_key_values=cache(3, 5),
        atol=1e-4, rtol=1e-3,
    )  # fmt: skip


_FRESH = """
import sys, torch, transformers
from tests.e2e import test_hf_caches as t
for name, dynamic in [("gpt2", True), ("whisper", False)]:
    t.check(name, dynamic=dynamic, mask=name == "gpt2")
    print(name, "ok")
"""


def test_fresh_process_first_export_has_cache_outputs() -> None:
    """No export and no cache input before: the classes are registered by the export itself."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _FRESH], cwd=root, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["gpt2", "ok", "whisper", "ok"]


@pytest.mark.slow
@pytest.mark.parametrize("mask", [False, True], ids=["ids", "ids+mask"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(MODELS))
def test_matrix(name: str, dynamic: bool, mask: bool, request: pytest.FixtureRequest) -> None:
    """Every model, static and dynamic, with and without a mask (about 3 minutes)."""
    run_slow = request.config.getoption("--runslow", default=False)
    if not run_slow and os.environ.get("ONNX_EXPORT_RUNSLOW") != "1":
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")
    if name == "whisper" and mask:
        pytest.skip("Whisper takes audio features, no attention mask")
    check(name, dynamic, mask)
