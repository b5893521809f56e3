"""Tiny transformers models (random weights, no hub access): static and dynamic export.

Each model is exported once with static shapes and once with dynamic batch and
sequence dims, then run in ONNX Runtime and compared with eager PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import pytest
import torch
from torch.export import Dim

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

transformers = pytest.importorskip("transformers")

EXPORT_BATCH, EXPORT_SEQ = 2, 8
OTHER_SIZES = [(3, 5), (1, 11)]
ATOL = 1e-4


def _bert() -> torch.nn.Module:
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return transformers.BertModel(config).eval()


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        vocab_size=100,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
        attn_implementation="sdpa",
    )
    return transformers.GPT2Model(config).eval()


def _llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="sdpa",
    )
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
