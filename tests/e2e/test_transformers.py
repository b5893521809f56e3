"""Tiny transformers models (random weights, no hub access): static and dynamic export.

Each model is exported once with static shapes and once with dynamic batch and
sequence dims, then run in ONNX Runtime and compared with eager PyTorch.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import pytest
import torch
from torch.export import Dim

import onnx_export
from tests.e2e.zoo_models import small_config
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

transformers = pytest.importorskip("transformers")

EXPORT_BATCH, EXPORT_SEQ = 2, 8
OTHER_SIZES = [(3, 5), (1, 11)]
ATOL = 1e-4


def _bert() -> torch.nn.Module:
    return transformers.BertModel(small_config("bert", attn_implementation="eager")).eval()


def _gpt2() -> torch.nn.Module:
    config = small_config(
        "gpt2", bos_token_id=0, eos_token_id=0, use_cache=False, attn_implementation="sdpa"
    )
    return transformers.GPT2Model(config).eval()


def _llama() -> torch.nn.Module:
    config = small_config("llama", use_cache=False, attn_implementation="sdpa")
    return transformers.LlamaModel(config).eval()


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "bert": _bert,
    "gpt2": _gpt2,
    "llama": _llama,
}
OUTPUTS = {
    "bert": ["last_hidden_state", "pooler_output"],
    "gpt2": ["last_hidden_state"],
    "llama": ["last_hidden_state"],
}
EMBEDDING = {
    "bert": "embeddings.word_embeddings.weight",
    "gpt2": "wte.weight",
    "llama": "embed_tokens.weight",
}


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    built = {}
    for name, make in MODELS.items():
        torch.manual_seed(0)
        built[name] = make()
    return built


def _inputs(batch: int, seq: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 100, (batch, seq), generator=generator)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    attention_mask[0, -1] = 0  # one padded position
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _simple_shapes() -> dict[str, Any]:
    return {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "seq"},
    }


def _check_dynamic(program: onnx_export.ONNXProgram, model: torch.nn.Module, name: str) -> None:
    inputs = list(program.model.graph.inputs)
    assert [v.name for v in inputs] == ["input_ids", "attention_mask"]
    for value in inputs:
        assert value.shape is not None
        assert [d.value if isinstance(d, ir.SymbolicDim) else d for d in value.shape] == [
            "batch",
            "seq",
        ], f"{value.name}: {value.shape}"
    assert [v.name for v in program.model.graph.outputs] == OUTPUTS[name]
    for seed, (batch, seq) in enumerate(OTHER_SIZES, start=1):
        diffs = assert_onnx_program_close(program, model, **_inputs(batch, seq, seed), atol=ATOL)
        assert len(diffs) == len(OUTPUTS[name])


@pytest.mark.parametrize("name", list(MODELS), ids=list(MODELS))
def test_static(models: dict[str, torch.nn.Module], name: str) -> None:
    model = models[name]
    program = onnx_export.dynamo_export(model, **_inputs(EXPORT_BATCH, EXPORT_SEQ))
    assert [v.name for v in program.model.graph.inputs] == ["input_ids", "attention_mask"]
    for value in program.model.graph.inputs:
        assert list(value.shape) == [EXPORT_BATCH, EXPORT_SEQ]  # type: ignore[arg-type]
    assert [v.name for v in program.model.graph.outputs] == OUTPUTS[name]
    # Weights are initializers named after their state_dict entries.
    assert EMBEDDING[name] in program.model.graph.initializers
    assert EMBEDDING[name] in model.state_dict()
    for seed in (1, 2):  # same shape, different tokens
        assert_onnx_program_close(
            program, model, **_inputs(EXPORT_BATCH, EXPORT_SEQ, seed), atol=ATOL
        )


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("bert", id="bert"),
        pytest.param("gpt2", id="gpt2"),
        pytest.param("llama", id="llama"),
    ],
)
def test_dynamic_simple_form(models: dict[str, torch.nn.Module], name: str) -> None:
    model = models[name]
    options = onnx_export.ExportOptions(dynamic_shapes=_simple_shapes())
    program = onnx_export.dynamo_export(
        model, **_inputs(EXPORT_BATCH, EXPORT_SEQ), export_options=options
    )
    _check_dynamic(program, model, name)


def test_bert_dynamic_torch_dims_with_range(models: dict[str, torch.nn.Module]) -> None:
    """BERT's sequence is bounded by its position embeddings: say so with a Dim range."""
    model = models["bert"]
    batch, seq = Dim("batch"), Dim("seq", max=64)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    program = onnx_export.dynamo_export(
        model,
        **_inputs(EXPORT_BATCH, EXPORT_SEQ),
        export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
    )
    _check_dynamic(program, model, "bert")


def test_decoding_loop_with_dynamic_cache_in_and_out(tmp_path: Any) -> None:
    """A causal LM called as in generation: ``model(ids, mask, cache=DynamicCache)``.

    The cache goes in and comes out as its key/value tensors; in this process the output
    is rebuilt as the model's own classes (``CausalLMOutputWithPast`` holding a
    ``DynamicCache``), so it can be fed back for the next step. A saved and reloaded
    model returns the cache as ``{"key_cache": [...], "value_cache": [...]}``.
    """
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(small_config("llama")).eval()

    def prompt(batch: int, past: int) -> Any:
        cache = transformers.DynamicCache()
        for layer in range(2):
            cache.update(torch.randn(batch, 2, past, 8), torch.randn(batch, 2, past, 8), layer)
        return cache

    past = {0: "batch", 2: "past"}
    options = onnx_export.ExportOptions(
        dynamic_shapes={
            "input_ids": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "total"},
            "cache": [[past, past], [past, past]],
        }
    )
    ids = torch.randint(0, 100, (2, 3))
    program = onnx_export.dynamo_export(
        model, ids, attention_mask=torch.ones(2, 7, dtype=torch.long), cache=prompt(2, 4),
        export_options=options,
    )  # fmt: skip
    assert [v.name for v in program.model.graph.inputs][2] == "cache.key_cache.0"
    graph = program.model.graph
    assert [str(d) for d in graph.inputs[2].shape] == ["batch", "2", "past", "8"]
    assert str(graph.outputs[1].shape[2]) == "past + seq"  # named dims in expressions

    ours, theirs = prompt(3, 5), None
    theirs = copy.deepcopy(ours)
    ids = torch.randint(0, 100, (3, 1))
    for step in range(3):
        mask = torch.ones(3, 5 + step + 1, dtype=torch.long)
        out = program(ids, attention_mask=mask, cache=ours)
        with torch.no_grad():
            expected = model(ids, attention_mask=mask, cache=theirs)
        assert type(out) is type(expected)
        assert isinstance(out.cache, transformers.DynamicCache)
        torch.testing.assert_close(out.logits, expected.logits, rtol=1e-3, atol=1e-4)
        for got, want in zip(out.cache.layers, expected.cache.layers, strict=True):
            assert got.keys.shape == (3, 2, 5 + step + 1, 8)
            torch.testing.assert_close(got.keys, want.keys, rtol=1e-3, atol=1e-4)
            torch.testing.assert_close(got.values, want.values, rtol=1e-3, atol=1e-4)
        ours, theirs = out.cache, expected.cache
        ids = expected.logits[:, -1:].argmax(-1)

    path = tmp_path / "decoder.onnx"
    program.save(path)
    loaded = onnx_export.load(path)
    ids, mask = torch.randint(0, 100, (1, 2)), torch.ones(1, 6, dtype=torch.long)
    cache = prompt(1, 4)
    out = loaded(ids, attention_mask=mask, cache=copy.deepcopy(cache))
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, cache=cache)
    assert sorted(out["cache"]) == ["key_cache", "value_cache"]
    torch.testing.assert_close(out["logits"], expected.logits, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(
        out["cache"]["value_cache"][1], expected.cache.layers[1].values, rtol=1e-3, atol=1e-4
    )

    # A fresh process that never exported: the input adapter registers DynamicCache.
    script = f"""
import torch, transformers, onnx_export
cache = transformers.DynamicCache()
for layer in range(2):
    cache.update(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), layer)
inputs = (torch.tensor([[1, 2]]),)
mask = torch.ones(1, 6, dtype=torch.long)
import copy
out = onnx_export.load({str(path)!r})(*inputs, attention_mask=mask, cache=copy.deepcopy(cache))
rebuilt = onnx_export.load({str(path)!r}, allowed_classes=[transformers.DynamicCache])(
    *inputs, attention_mask=mask, cache=cache
)
assert isinstance(rebuilt["cache"], transformers.DynamicCache), type(rebuilt["cache"])
assert torch.equal(rebuilt["cache"].layers[0].keys, out["cache"]["key_cache"][0])
print(tuple(out["cache"]["key_cache"][0].shape))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "(1, 2, 6, 8)"
