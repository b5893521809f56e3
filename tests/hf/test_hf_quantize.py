"""``export_pretrained(quantize=...)``: int4 MatMulNBits decoders, int8 encoders, refusals."""

from __future__ import annotations

import collections
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from onnx_export import hf

tf = pytest.importorskip("transformers")


def _ops(path: pathlib.Path) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def _llama() -> tf.LlamaForCausalLM:
    config = tf.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    return tf.LlamaForCausalLM(config).eval()


def test_int4_is_matmulnbits_and_keeps_the_top_token(tmp_path: pathlib.Path) -> None:
    model = _llama()
    hf.export_pretrained(model, tmp_path / "q4", quantize="int4", quantize_head=False)
    graph = onnx.load(tmp_path / "q4" / "model.onnx").graph
    weights = {t.name for t in graph.initializer}
    float_linear = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    # 7 linear layers a layer are MatMulNBits; the head (kept float) is the one left.
    assert sum(n.op_type == "MatMulNBits" for n in graph.node) == 7 * 2
    assert [n.output[0] for n in float_linear] == ["logits"]
    ids = torch.randint(1, 128, (2, 24), generator=torch.Generator().manual_seed(3))
    quantized = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "q4").logits(ids.numpy())
    with torch.no_grad():
        expected = model(ids).logits.numpy()
    assert quantized.shape == expected.shape
    agreement = float(np.mean(quantized.argmax(-1) == expected.argmax(-1)))
    # 4-bit weights in blocks of 32 move each logit by a few percent of its spread: the
    # top token of a random model (small margins) may change at some positions, not most.
    assert agreement >= 0.75, agreement
    error = np.abs(quantized - expected).max() / np.abs(expected).max()
    assert error < 0.25, error


def test_int8_encoder_is_close_to_eager(tmp_path: pathlib.Path) -> None:
    config = tf.BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = tf.BertModel(config).eval()
    hf.export_pretrained(model, tmp_path / "q8", quantize="int8")
    path = tmp_path / "q8" / "model.onnx"
    assert _ops(path)["MatMulInteger"] > 0
    ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    names = {i.name for i in session.get_inputs()}
    if "token_type_ids" in names:
        feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
    (got,) = session.run(["last_hidden_state"], feed)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    cosine = np.sum(got * want, -1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))
    assert cosine.min() > 0.98, cosine.min()  # int8 weights and activations: close, not equal


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quantize": "int3"}, "quantize must be one of int4, int8"),
        ({"quantize": "int4", "quantize_block_size": 48}, "block_size must be a power of 2"),
        ({"quantize": "int4", "quantize_accuracy_level": 7}, "accuracy_level must be 0 to 4"),
    ],
)
def test_bad_quantize_options_are_refused_before_export(
    tmp_path: pathlib.Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(hf.CheckpointError, match=message):
        hf.export_pretrained(_llama(), tmp_path / "out", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_the_int4_quantizer_leaves_the_root_logger_alone() -> None:
    # ORT's quantizer module calls logging.basicConfig(level=INFO) on import; in a fresh
    # process (the import is cached in this one) the user's root logger must be untouched.
    code = (
        "import logging\n"
        "from onnx_export.hf.export._quantize import _import_quantizer\n"
        "assert _import_quantizer().__name__ == 'MatMulNBitsQuantizer'\n"
        "root = logging.getLogger()\n"
        "print(logging.getLevelName(root.level), len(root.handlers))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["WARNING", "0"]


def test_the_folder_records_the_int4_settings(tmp_path: pathlib.Path) -> None:
    """onnx_export.json says how the weights were quantized (accuracy level 4 by default:
    int8 activations, ORT's fastest CPU kernels for one token and for several)."""
    import json

    hf.export_pretrained(_llama(), tmp_path / "q4", quantize="int4", quantize_block_size=64)
    manifest = json.loads((tmp_path / "q4" / "onnx_export.json").read_text())
    assert manifest["quantization"] == {
        "mode": "int4",
        "block_size": 64,
        "accuracy_level": 4,
        "head": True,
        "embeddings": False,
    }
    graph = onnx.load(tmp_path / "q4" / "model.onnx").graph
    levels = {
        onnx.helper.get_attribute_value(a)
        for n in graph.node
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name in ("accuracy_level", "block_size")
    }
    assert levels == {4, 64}
    hf.export_pretrained(_llama(), tmp_path / "fp32")
    assert "quantization" not in json.loads((tmp_path / "fp32" / "onnx_export.json").read_text())
