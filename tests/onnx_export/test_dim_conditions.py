"""Comparisons of several dynamic sizes a capture took a branch on: kept, checked, respected.

A model that pads a short mask and slices a long one (transformers' ``masking_utils``)
holds, once captured, only on the branch its example took (``total = past + seq``). The
file says so in its adapter spec (``DimCondition``), refuses calls that break it, and the
export's second sizes and edge probe keep it, so a decoder with a key/value cache exports
from a one-token example and serves every past and every number of new tokens.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import onnx_export
from onnx_export.adapters import AdapterSpec, AdapterSpecError, DimCondition, InputShapeError
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def test_condition_reads_sizes_and_nothing_else() -> None:
    c = DimCondition("total >= past + seq", "the model's code at m.py:3")
    assert c.names == ("total", "past", "seq") and c.linear
    assert c.holds({"total": 5, "past": 3, "seq": 2}) is True
    assert c.holds({"total": 4, "past": 3, "seq": 2}) is False
    assert c.holds({"total": 4}) is None  # a size it reads is missing
    assert c.difference({"total": 4, "past": 3, "seq": 2}) == -1
    product = DimCondition("8*seq*(past + seq) <= 8*past + 8*seq")
    assert not product.linear and product.holds({"seq": 1, "past": 3}) is True
    assert DimCondition("Eq(Mod(a + b, 4), 0)").holds({"a": 3, "b": 5}) is True
    assert DimCondition("Ne(a, b)").holds({"a": 3, "b": 3}) is False
    assert DimCondition("(a//2) > b").holds({"a": 9, "b": 3}) is True
    for bad in ("__import__('os').system('x')", "a.b > 1", "a > b > c", "a ** 2 > b", "f(a) > 1"):
        with pytest.raises(ValueError, match=r"comparison|grammar"):
            DimCondition(bad)


def _spec_with(condition: dict[str, Any]) -> str:
    from onnx_export.adapters import build_adapter_spec

    spec = build_adapter_spec(None, (np.zeros((2, 3), np.float32),), {}, np.zeros(2))
    obj = json.loads(spec.to_json())
    obj["conditions"] = [condition]
    return json.dumps(obj)


def test_spec_json_round_trip_and_strict_reading() -> None:
    text = _spec_with({"expression": "a >= b", "origin": "m.py:3"})
    spec = AdapterSpec.from_json(text)
    assert spec.conditions == (DimCondition("a >= b", "m.py:3"),)
    assert AdapterSpec.from_json(spec.to_json()) == spec
    with pytest.raises(AdapterSpecError, match=r"conditions\[0\]\.expression"):
        AdapterSpec.from_json(_spec_with({"expression": "open('x') > 1"}))
    with pytest.raises(AdapterSpecError, match=r"conditions\[0\]"):
        AdapterSpec.from_json(_spec_with({"expression": "a > b", "run": "x"}))


class PadOrSlice(torch.nn.Module):
    """Pads a mask shorter than the tokens, slices a longer one (as transformers does)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if mask.shape[1] < x.shape[1]:
            mask = torch.nn.functional.pad(mask, (0, x.shape[1] - mask.shape[1]), value=1.0)
        elif mask.shape[1] > x.shape[1]:
            mask = mask[:, -x.shape[1] :]
        return x * mask[..., None] + 1


def _export(model: torch.nn.Module, n: int, m: int) -> onnx_export.ONNXProgram:
    shapes = {"x": {0: "batch", 1: "n"}, "mask": {0: "batch", 1: "m"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return onnx_export.dynamo_export(
            model, torch.randn(2, n, 4), torch.rand(2, m),
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )  # fmt: skip


def test_branch_on_two_sizes_is_checked_at_call_time(tmp_path: Path) -> None:
    model = PadOrSlice().eval()
    program = _export(model, 5, 8)  # the slicing branch: m > n
    spec = program.adapter_spec
    assert spec is not None and {c.expression for c in spec.conditions} == {"m >= n", "m > n"}
    for n, m in ((3, 7), (1, 2), (6, 11)):
        assert_onnx_program_close(program, model, torch.randn(3, n, 4), torch.rand(3, m))
    program.save(tmp_path / "m.onnx")
    loaded = onnx_export.load(tmp_path / "m.onnx")
    np.testing.assert_allclose(
        loaded(np.ones((1, 2, 4), np.float32), np.full((1, 3), 2, np.float32)),
        model(torch.ones(1, 2, 4), torch.full((1, 3), 2.0)).numpy(),
    )
    for n, m in ((5, 5), (5, 3)):  # the other branches: refused, naming the model's line
        with pytest.raises(InputShapeError, match=r"where m >=? n, got m = \d+.*test_dim_cond"):
            loaded(np.ones((1, n, 4), np.float32), np.ones((1, m), np.float32))


def test_cli_info_lists_and_run_refuses_a_broken_condition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx_export.cli import main

    _export(PadOrSlice().eval(), 5, 8).save(tmp_path / "m.onnx")
    assert main(["info", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "conditions between dimensions (calls that break them are refused):" in out
    assert "m > n" in out
    ones = np.ones((1, 4, 4), np.float32)
    np.savez(tmp_path / "bad.npz", x=ones, mask=np.ones((1, 4), np.float32))
    assert main(["run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "bad.npz")]) == 1
    err = capsys.readouterr().err
    assert "where m > n" in err and "Traceback" not in err


def test_the_example_on_the_boundary_keeps_it() -> None:
    """Example n = m: torch ties the two (one name in the file); other equal sizes serve."""
    model = PadOrSlice().eval()
    program = _export(model, 4, 4)
    for size in (1, 2, 7):
        assert_onnx_program_close(program, model, torch.randn(2, size, 4), torch.rand(2, size))
    with pytest.raises(InputShapeError):
        program(torch.randn(2, 4, 4), torch.rand(2, 6))


class CausalFlag(torch.nn.Module):
    """``q_length > 1 and mask is None``, as transformers' SDPA wrapper decides is_causal."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        causal = x.shape[1] > 1 and mask is None
        return x * mask[:, :1, None] + (1.0 if causal else 2.0)


def test_a_cap_a_one_token_example_made_is_widened() -> None:
    """Traced at one token, the flag bounds the tokens to 1; both outcomes agree past it."""
    model = CausalFlag().eval()
    shapes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = onnx_export.dynamo_export(
            model, torch.randn(2, 1, 4), torch.rand(2, 3),
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )  # fmt: skip
    for batch, seq in ((1, 1), (3, 2), (2, 9)):
        assert_onnx_program_close(program, model, torch.randn(batch, seq, 4), torch.rand(batch, 3))


transformers = pytest.importorskip("transformers")


def _decoder(family: str) -> Any:
    from tests.e2e.zoo_models import small_config, small_decoder_config

    torch.manual_seed(0)
    if family == "gpt2":  # its mask goes through .view(batch, -1): sizes merge by name
        return transformers.GPT2LMHeadModel(small_config("gpt2", bos_token_id=0)).eval()
    if family == "mistral":  # sliding-window masks: torch fails at one token; retried
        config = small_decoder_config("MistralConfig", num_key_value_heads=2)
        return transformers.MistralForCausalLM(config).eval()
    if family == "gemma2":  # a one-token capture is refused; the retry's sizes pad the mask
        config = small_decoder_config("Gemma2Config", num_key_value_heads=2, head_dim=8)
        return transformers.Gemma2ForCausalLM(config).eval()
    config = small_decoder_config("LlamaConfig", num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config).eval()


def _step(model: Any, batch: int, past: int, seq: int, extra: int = 0) -> tuple[Any, ...]:
    """New token ids, a mask over past and new tokens, and the cache of the past.

    The same sizes give the same values: a second call gives a cache of its own (eager's
    call extends the cache it is given).
    """
    draw = torch.Generator().manual_seed(past * 100 + seq * 10 + batch)
    ids = torch.randint(3, 100, (batch, past + seq), generator=draw)
    with torch.no_grad():
        cache = model(ids[:, :past], use_cache=True).past_key_values
    mask = torch.ones(batch, past + seq + extra, dtype=torch.long)
    return ids[:, past:], mask, cache


@pytest.mark.parametrize(
    ("family", "example_tokens"),
    [("llama", 1), ("llama", 2), ("gpt2", 1), ("gemma2", 1), ("mistral", 1)],
)
def test_decoder_with_cache_exports_from_a_one_token_example(
    family: str, example_tokens: int
) -> None:
    """The usual generation step: the file serves any past and any number of new tokens.

    A one-token example used to be refused by the edge probe (or, unchecked, to write a
    file that failed at two new tokens): the second sizes broke ``total = past + seq``,
    and a cap the one token made (``is_causal = q_length > 1 and ...``) was kept.
    """
    model = _decoder(family)
    layers = model.config.num_hidden_layers
    past_dims = {0: "batch", 2: "past"}
    shapes = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "past_key_values": [[past_dims] * layers, [past_dims] * layers],
    }
    ids, mask, cache = _step(model, 2, 3, example_tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        program = onnx_export.dynamo_export(
            model, ids, attention_mask=mask, past_key_values=cache,
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )  # fmt: skip
        for batch, past, seq in ((1, 1, 1), (2, 5, 1), (3, 3, 2), (1, 4, 3), (2, 2, 8)):
            ids, mask, cache = _step(model, batch, past, seq)
            _, _, again = _step(model, batch, past, seq)
            want = model(ids, attention_mask=mask, past_key_values=cache).logits
            got = program(ids, attention_mask=mask, past_key_values=again)
            torch.testing.assert_close(got.logits, want, atol=1e-4, rtol=1e-3)
        # A mask longer than past and new tokens: eager slices it; the file either has
        # that branch (Gemma 2's) or refuses the call naming transformers' comparison.
        ids, mask, cache = _step(model, 2, 3, 1, extra=2)
        _, _, again = _step(model, 2, 3, 1, extra=2)
        want = model(ids, attention_mask=mask, past_key_values=cache).logits
        try:
            got = program(ids, attention_mask=mask, past_key_values=again)
        except InputShapeError as error:
            assert family not in ("gemma2", "mistral")
            assert re.search(r"where .*total.*masking_utils", str(error)), error
        else:
            torch.testing.assert_close(got.logits, want, atol=1e-4, rtol=1e-3)
