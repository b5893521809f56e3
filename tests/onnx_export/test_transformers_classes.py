"""Classes of exporter failures on ``transformers`` models, each met by a tiny model.

Models are built from tiny configs with random weights (the sizes of transformers' own
ModelTester configs) and called as transformers' tests call them, ``model(**inputs)``
with the default cache on; every export runs in ONNX Runtime against eager, the
returned cache tensors included.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch

import onnx_export
from tests.helpers import export_and_check

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _gemma3_with_image() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """Gemma 3 with a SigLIP tower: its image-token mask is built under ``vmap``."""
    text = {
        "model_type": "gemma3_text", "vocab_size": 99, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
        "intermediate_size": 37, "head_dim": 8, "sliding_window": 4, "pad_token_id": 0,
    }  # fmt: skip
    vision = {
        "model_type": "siglip_vision_model", "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 37, "image_size": 20, "patch_size": 5,
    }  # fmt: skip
    config = transformers.Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=2,
        image_token_index=4, boi_token_index=5, eoi_token_index=6,
    )  # fmt: skip
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    ids = torch.randint(7, 99, (2, 10))
    ids[:, 1] = 4  # one image token per image
    inputs = {
        "input_ids": ids, "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(2, 3, 20, 20), "token_type_ids": (ids == 4).long(),
    }  # fmt: skip
    return model, inputs


def test_constants_lifted_by_the_decomposition_retrace_are_kept() -> None:
    """Gemma 3 with an image needs ``run_decompositions`` (a ``detach_``); its re-trace
    lifts the cache layers' empty ``torch.tensor([])`` again, which torch's decomposed
    program left out of its constants ("lifted_tensor_0 is not in the constants
    dictionary"). ``torch._check_tensor_all`` (image tokens == features) goes with the
    other assertions."""
    torch.manual_seed(0)
    model, inputs = _gemma3_with_image()
    program = export_and_check(model, **inputs)
    names = [v.name for v in program.model.graph.outputs]
    assert "cache.key_cache.1" in names and "cache.value_cache.1" in names


def _deepseek_vl() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    text = {
        "model_type": "llama", "vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 37,
    }  # fmt: skip
    vision = {
        "model_type": "siglip_vision_model", "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 37, "image_size": 20, "patch_size": 5,
        "vision_use_head": False,
    }  # fmt: skip
    config = transformers.DeepseekVLConfig(text_config=text, vision_config=vision, image_token_id=4)
    model = transformers.DeepseekVLForConditionalGeneration(config).eval()
    ids = torch.randint(7, 99, (2, 20))
    ids[:, 1:17] = 4  # 16 patches per image
    pixels = torch.randn(2, 3, 20, 20)
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": pixels}


def _emu3() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """Emu3 with its VQ-VAE image tokenizer (transformers' Emu3Vision2TextModelTester)."""
    vocab = {chr(i): i for i in range(99)}
    vocab.update({f"<|visual token{i:06d}|>": i for i in range(3, 23)})
    vocab.update({"<image>": 3, "<|extra_200|>": 4})
    text = transformers.Emu3TextConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=37, pad_token_id=0, bos_token_id=1,
        eos_token_id=2,
    )  # fmt: skip
    vq = {
        "codebook_size": 20, "temporal_downsample_factor": 1, "base_channels": 32,
        "channel_multiplier": [1, 2, 1], "hidden_size": 32, "attn_resolutions": [],
    }  # fmt: skip
    config = transformers.Emu3Config(text_config=text, vq_config=vq, vocabulary_map=vocab)
    model = transformers.Emu3ForConditionalGeneration(config).eval()
    ids = torch.randint(5, 99, (2, 19))
    ids[:, :12] = 3  # the image's tokens
    return model, {
        "input_ids": ids, "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.rand(2, 3, 15, 15), "image_sizes": torch.tensor([[15, 15]] * 2),
    }  # fmt: skip


@pytest.mark.slow  # ~10 s each; Gemma 3 above covers the class in CI
@pytest.mark.parametrize("build", [_deepseek_vl, _emu3], ids=["deepseek_vl", "emu3"])
def test_vision_language_models_with_their_cache(build: Any) -> None:
    """DeepSeek-VL and Emu3 failed like Gemma 3 (lifted constants of the re-trace).

    The model runs eagerly first, as transformers' tests do: Emu3's vocabulary mapping
    (``cached_property``) is then computed from real tensors. Traced first, Emu3 stops at
    ``int(size[0] / ...)`` of ``image_sizes`` with a first line naming that line."""
    torch.manual_seed(0)
    model, inputs = build()
    with torch.no_grad():
        model(**inputs)
    program = export_and_check(model, **inputs)
    assert "cache.key_cache.1" in {v.name for v in program.model.graph.outputs}


def _mamba() -> torch.nn.Module:
    config = transformers.MambaConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, intermediate_size=32,
        state_size=16, conv_kernel=4, time_step_rank=8,
    )  # fmt: skip
    return transformers.MambaForCausalLM(config).eval()


def _linear_cache_names(program: onnx_export.ONNXProgram) -> list[str]:
    """The two Mamba layers' state tensors, in the flattened order: conv and recurrent
    states, and from transformers 5.25 on, the layer's token counter
    (``cumulative_length_linear``), a tensor the layer carries from step to step."""
    graph_names = {v.name for v in [*program.model.graph.inputs, *program.model.graph.outputs]}
    counter = "cumulative_length_linear"
    names = []
    for i in range(2):
        names.append(f"cache.layers.{i}.conv_states.0")
        if f"cache.layers.{i}.{counter}" in graph_names:
            assert hasattr(transformers.cache_utils.LinearAttentionLayer(), counter)
            names.append(f"cache.layers.{i}.{counter}")
        names.append(f"cache.layers.{i}.recurrent_states.0")
    return names


def test_dynamic_cache_of_linear_attention_layers_is_an_output() -> None:
    """Mamba returns a ``DynamicCache`` of ``LinearAttentionLayer`` (conv and recurrent
    states), which transformers' own ``DynamicCache`` flattening refuses; it flattens
    attribute by attribute and comes out as named state tensors."""
    torch.manual_seed(0)
    model = _mamba()
    program = export_and_check(model, input_ids=torch.randint(0, 99, (2, 7)))
    names = [v.name for v in program.model.graph.outputs]
    assert names[1:] == _linear_cache_names(program)


def _gemma3_text() -> torch.nn.Module:
    """A tiny Gemma 3 text model: two layers, a sliding window of 4 on the first."""
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=37, head_dim=8, sliding_window=4,
    )  # fmt: skip
    return transformers.Gemma3ForCausalLM(config).eval()


def test_sliding_window_cache_is_an_output() -> None:
    """Gemma 3 text (sliding-window layers): the cache's sliding layers come out as keys
    and values, cut to the window."""
    model = _gemma3_text()
    ids = torch.randint(0, 99, (3, 7))
    program = export_and_check(model, input_ids=ids, attention_mask=torch.ones_like(ids))
    assert [str(d) for d in program.model.graph.outputs[1].shape or ()] == ["3", "2", "3", "8"]


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # the line the error names
            return x * 2
        return x - 1


def _first_line(model: torch.nn.Module, **inputs: torch.Tensor) -> str:
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(model, **inputs)
    return str(caught.value).splitlines()[0]


def test_data_dependent_if_is_named_on_the_first_line() -> None:
    """The first line names the cause, the model's file:line and code, and the fixes."""
    first = _first_line(Branchy(), x=torch.randn(3))
    line = Branchy.forward.__code__.co_firstlineno + 1
    assert f"{__file__}:{line} (`if x.sum() > 0:  # the line the error names`)" in first
    assert first.startswith("torch.export could not capture the model: it branches on")
    assert "data-dependent control flow" in first
    assert "torch.cond(" in first and "torch._check(" in first


class _NumpyScale(torch.nn.Module):
    """Splits its input with numpy's ``frexp``, as I-BERT's quantizer did before capture
    replaced it (``capture/patches/_quant_frexp.py``; Longformer's branch:
    ``_global_attention.py``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mantissa, _ = np.frexp(x.numpy())  # the line the error names
        return torch.from_numpy(mantissa)


def test_numpy_call_on_a_traced_tensor_is_named() -> None:
    """The first line names the line that hands a traced tensor to numpy and the torch op
    to use instead."""
    first = _first_line(_NumpyScale(), x=torch.rand(3, dtype=torch.float64))
    line = _NumpyScale.forward.__code__.co_firstlineno + 1
    assert f"{__file__}:{line}" in first and "np.frexp(" in first, first
    assert "hands a traced tensor to numpy" in first and "torch.frexp" in first


_FRESH = """
import sys, torch, transformers, onnx_export
from tests.onnx_export.test_transformers_classes import _mamba_step
model, inputs = _mamba_step()
with torch.no_grad():
    want = model(**_mamba_step()[1])
loaded = onnx_export.load(sys.argv[1], allowed_classes=[transformers.DynamicCache])
got = loaded(**inputs)
layers = got["cache"].layers
print(*sorted({type(layer).__name__ for layer in layers}))
torch.testing.assert_close(torch.as_tensor(got["logits"]), want.logits, rtol=1e-4, atol=1e-5)
for ours, theirs in zip(layers, want.cache.layers, strict=True):
    for kind in ("conv_states", "recurrent_states"):
        mine, eager = getattr(ours, kind)[0], getattr(theirs, kind)[0]
        torch.testing.assert_close(torch.as_tensor(mine), eager, rtol=1e-4, atol=1e-5)
print("ok")
"""


def _mamba_step() -> tuple[torch.nn.Module, dict[str, object]]:
    """Mamba and the inputs of its next step: one token and the states of seven."""
    torch.manual_seed(0)
    model = _mamba()
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 99, (2, 7))).cache
    return model, {"input_ids": torch.randint(0, 99, (2, 1)), "cache": cache, "use_cache": True}


def test_dynamic_cache_of_linear_attention_layers_is_an_input() -> None:
    """Mamba's next step takes the states back: the cache goes in as its four tensors and
    the updated states come out. ``verify`` agrees: its eager run updates copies of the
    states, not the ones ONNX Runtime is given next."""
    model, inputs = _mamba_step()
    program = export_and_check(model, **inputs)
    assert program.verify(**inputs).ok
    names = [v.name for v in program.model.graph.inputs]
    assert names == ["input_ids", *_linear_cache_names(program)]


@pytest.mark.slow  # ~20 s: a second process imports torch and transformers
def test_linear_attention_cache_in_a_fresh_process(tmp_path: pathlib.Path) -> None:
    """A process that exported nothing takes Mamba's cache as an input and rebuilds the
    returned one (``allowed_classes``) with the eager values."""
    model, inputs = _mamba_step()
    onnx_export.dynamo_export(model, **inputs).save(tmp_path / "mamba.onnx")
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _FRESH, str(tmp_path / "mamba.onnx")], cwd=root,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["LinearAttentionLayer", "ok"]


@pytest.mark.slow  # ~16 s: Falcon-H1's Mamba mixer traced step by step
def test_hybrid_cache_of_mamba_and_attention_layers_is_an_output() -> None:
    """Falcon-H1 mixes Mamba states and attention keys/values in each layer
    (``LinearAttentionAndFullAttentionLayer``): every tensor comes out by name."""
    torch.manual_seed(0)
    config = transformers.FalconH1Config(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=37,
    )  # fmt: skip
    model = transformers.FalconH1ForCausalLM(config).eval()
    program = export_and_check(model, input_ids=torch.randint(0, 99, (2, 7)))
    names = {v.name for v in program.model.graph.outputs}
    for kind in ("conv_states.0", "recurrent_states.0", "keys", "values"):
        assert f"cache.layers.1.{kind}" in names, names


def test_sliding_window_cache_is_an_input() -> None:
    """Gemma 3 text's next step takes its sliding-window cache back, keys and values by name."""
    model = _gemma3_text()
    ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        cache = model(input_ids=ids).past_key_values
    mask = torch.ones(2, 8, dtype=torch.long)
    program = export_and_check(model, input_ids=ids[:, :1], attention_mask=mask, cache=cache)
    names = [v.name for v in program.model.graph.inputs]
    assert names[2:] == [f"cache.{kind}_cache.{i}" for kind in ("key", "value") for i in range(2)]


def test_static_cache_is_an_input_and_an_output() -> None:
    """Llama given a fresh ``StaticCache`` (``StaticLayer``): its position counters go
    in, the filled fixed-length keys and values come out."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=37,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    cache = transformers.StaticCache(config=config, max_cache_len=16)
    ids = torch.randint(0, 99, (2, 7))
    program = export_and_check(model, input_ids=ids, cache=cache, use_cache=True)
    keys = next(v for v in program.model.graph.outputs if v.name == "cache.layers.1.keys")
    assert [str(d) for d in keys.shape or ()] == ["2", "2", "16", "8"]


@pytest.mark.slow  # ~10 s: MoE and the compressed-attention cache
def test_deepseek_v4_cache_layers_are_an_output() -> None:
    """DeepSeek V4's own cache layers (``DeepseekV4HCACache``, a sliding-window layer with
    compressor buffers) come out attribute by attribute."""
    torch.manual_seed(0)
    config = transformers.DeepseekV4Config(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, q_lora_rank=16, index_n_heads=2,
        index_head_dim=16, index_topk=4, head_dim=16,
    )  # fmt: skip
    model = transformers.DeepseekV4ForCausalLM(config).eval()
    program = export_and_check(model, input_ids=torch.randint(0, 99, (2, 7)), atol=1e-4)
    names = {v.name for v in program.model.graph.outputs}
    assert {"cache.layers.1.keys", "cache.layers.1.values"} <= names, names
