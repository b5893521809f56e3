"""``onnx-export hf --dtype float16|bfloat16``: half-precision folders, checked on the CPU.

ONNX Runtime's CPU provider has float16 kernels for the fused decoder's ops
(GroupQueryAttention, SkipSimplifiedLayerNormalization, MatMulNBits), so the float16
decoders are generated from here and compared with transformers in float16. bfloat16 has no
CPU kernels: its graphs are checked (the export itself compares them with transformers,
computing in float32) and run on CUDA by ``bench/gpu_check.py``.
"""

from __future__ import annotations

import collections
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from onnx_export import hf
from onnx_export.cli import main
from onnx_export.hf.runtime._session import host_float32

tf = pytest.importorskip("transformers")

_FLOAT16, _BFLOAT16 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16


def _llama(folder: pathlib.Path, family: str = "llama") -> pathlib.Path:
    """A tiny decoder that hf fuses (head size 16: GQA rotates inside), saved in float32."""
    config = tf.AutoConfig.for_model(
        family,
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=None,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    return folder


def _graph(folder: pathlib.Path) -> onnx.GraphProto:
    return onnx.load(folder / "model.onnx").graph


def _types(graph: onnx.GraphProto) -> dict[str, int]:
    values = [*graph.input, *graph.output]
    return {v.name: v.type.tensor_type.elem_type for v in values}


def _export(checkpoint: pathlib.Path, out: pathlib.Path, *options: str) -> None:
    assert main(["hf", str(checkpoint), "-o", str(out), *options]) == 0


def _reference(checkpoint: pathlib.Path, dtype: torch.dtype) -> object:
    return tf.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).eval()


@pytest.mark.parametrize("family", ["llama", pytest.param("qwen2", marks=pytest.mark.slow)])
def test_float16_fused_decoder_generates_as_transformers(
    tmp_path: pathlib.Path, family: str
) -> None:
    checkpoint = _llama(tmp_path / "ckpt", family)
    _export(checkpoint, tmp_path / "out", "--dtype", "float16", "--target", "onnxruntime")
    graph = _graph(tmp_path / "out")
    ops = collections.Counter(n.op_type for n in graph.node)
    assert ops["GroupQueryAttention"] == 2 and ops["SkipSimplifiedLayerNormalization"] >= 3
    types = _types(graph)
    assert types["logits"] == types["past_key_values.0.key"] == types["present.1.value"] == _FLOAT16
    assert types["input_ids"] == onnx.TensorProto.INT64
    weights = [t for t in graph.initializer if t.data_type in (onnx.TensorProto.FLOAT, _FLOAT16)]
    assert weights and all(t.data_type == _FLOAT16 for t in weights if t.dims)
    model = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "out")
    ids = torch.tensor([[1, 5, 9, 22, 40, 7], [1, 30, 31, 32, 33, 34]])
    with torch.no_grad():
        want = _reference(checkpoint, torch.float16).generate(
            ids, max_new_tokens=12, do_sample=False
        )
    got = model.generate(ids.numpy(), max_new_tokens=12)
    # float16 ties may flip a token where two logits round alike; none do on these prompts
    np.testing.assert_array_equal(np.asarray(got), want.numpy())


def test_float16_int4_has_float16_scales_and_matches_float32_int4(tmp_path: pathlib.Path) -> None:
    """The same 4-bit weights with float16 scales and activations as with float32 ones.

    (How far int4 moves a random model's logits from the float model's is
    test_hf_quantize's subject; here only the precision differs.)
    """
    checkpoint = _llama(tmp_path / "ckpt")
    int4 = ("--target", "onnxruntime", "--quantize", "int4", "--no-quantize-head")
    _export(checkpoint, tmp_path / "q4-16", "--dtype", "float16", *int4)
    _export(checkpoint, tmp_path / "q4-32", *int4)
    graph = _graph(tmp_path / "q4-16")
    initializers = {t.name: t for t in graph.initializer}
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == 5 * 2  # packed QKV, o_proj, packed gate/up, down_proj a layer
    assert all(initializers[n.input[2]].data_type == _FLOAT16 for n in nbits)  # the scales
    assert sum(n.op_type == "GroupQueryAttention" for n in graph.node) == 2
    ids = torch.randint(1, 96, (8, 24), generator=torch.Generator().manual_seed(3)).numpy()
    half = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "q4-16").logits(ids)
    full = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "q4-32").logits(ids)
    assert half.shape == full.shape == (8, 1, 96)  # the fused decoder: last position only
    assert float(np.mean(half.argmax(-1) == full.argmax(-1))) >= 0.75
    error = np.abs(half.astype(np.float32) - full).max() / np.abs(full).max()
    assert error < 0.1, error  # float16 weights round to other nibbles now and then


def test_bfloat16_graphs_are_bfloat16(tmp_path: pathlib.Path) -> None:
    checkpoint = _llama(tmp_path / "ckpt")
    _export(checkpoint, tmp_path / "out", "--dtype", "bfloat16", "--target", "onnxruntime")
    types = _types(_graph(tmp_path / "out"))
    assert types["logits"] == types["past_key_values.1.value"] == _BFLOAT16
    ops = {n.op_type for n in _graph(tmp_path / "out").node}
    assert "GroupQueryAttention" in ops


def test_float16_speech_seq2seq_logits_match_transformers(tmp_path: pathlib.Path) -> None:
    """Whisper's encoder and decoder in float16 (its example features drawn in float16)."""
    from tests.hf.checkpoints import CASES

    reference = CASES["whisper"].save(tmp_path / "ckpt").to(torch.float16)
    _export(tmp_path / "ckpt", tmp_path / "out", "--dtype", "float16")
    for name in ("encoder_model.onnx", "decoder_model.onnx"):
        types = _types(onnx.load(tmp_path / "out" / name).graph)
        assert _FLOAT16 in types.values() and onnx.TensorProto.FLOAT not in types.values()
    config = reference.config
    generator = torch.Generator().manual_seed(0)
    shape = (1, config.num_mel_bins, 2 * config.max_source_positions)
    features = torch.randn(*shape, generator=generator).to(torch.float16)
    start = torch.tensor([[config.decoder_start_token_id, 5, 6]])
    model = hf.OrtModelForSeq2SeqLM.from_pretrained(tmp_path / "out")
    got = model.logits(input_features=features.numpy(), decoder_input_ids=start.numpy())
    with torch.no_grad():
        want = reference(input_features=features, decoder_input_ids=start).logits.float()
    np.testing.assert_allclose(got.astype(np.float32), want.numpy(), rtol=1e-2, atol=1e-2)


def test_unknown_dtype_exits_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hf", str(tmp_path), "-o", str(tmp_path / "out"), "--dtype", "int8"]) == 2
    assert "--dtype" in capsys.readouterr().err


def test_bfloat16_logits_are_read_as_float32_exactly() -> None:
    bits = np.array([[0x3FC0, 0xC010, 0x7F80]], np.uint16)  # 1.5, -2.25, inf
    value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, _BFLOAT16)
    np.testing.assert_array_equal(host_float32(value._ortvalue), [[1.5, -2.25, np.inf]])
