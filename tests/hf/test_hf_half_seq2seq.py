"""``onnx-export hf --dtype float16`` for the seq2seq families that guard against float16.

BART's and Marian's encoder layers clamp on overflow behind a data-dependent ``if`` (traced
as a select, ``capture/patches/_finite_branches.py``); T5 keeps its feed-forward output ``wo`` in
float32 (``_keep_in_fp32_modules``, honoured by the conversion). Each folder's greedy tokens
are compared with transformers' ``generate()`` in float16 (ONNX Runtime's CPU provider runs
these graphs in float16, through float32 where it lacks a kernel).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from onnx_export import hf
from onnx_export.cli import main
from tests.hf.checkpoints import _SEQ2SEQ, CASES

tf = pytest.importorskip("transformers")


def _marian() -> Any:
    config = tf.MarianConfig(
        **{**_SEQ2SEQ, "init_std": 0.5},
        max_position_embeddings=64,
        pad_token_id=1,
        decoder_start_token_id=1,
        eos_token_id=95,
        forced_eos_token_id=95,
        scale_embedding=False,
    )
    return tf.MarianMTModel(config)


_BUILDS: dict[str, Callable[[], Any]] = {
    "bart": CASES["bart"].build,
    "marian": _marian,
    "t5": CASES["t5"].build,  # initializer_factor 8: large activations, as T5's in float16
}


def _save(name: str, folder: pathlib.Path) -> pathlib.Path:
    torch.manual_seed(0)
    _BUILDS[name]().eval().save_pretrained(folder)
    return folder


def _greedy_both(checkpoint: pathlib.Path, out: pathlib.Path) -> tuple[Any, Any]:
    ids = torch.tensor([[5, 9, 22, 40, 7, 3], [30, 31, 32, 33, 34, 35]])
    reference = tf.AutoModelForSeq2SeqLM.from_pretrained(checkpoint, dtype=torch.float16).eval()
    with torch.no_grad():
        want = reference.generate(ids, max_new_tokens=10, do_sample=False)
    got = hf.OrtModelForSeq2SeqLM.from_pretrained(out).generate(ids.numpy(), max_new_tokens=10)
    return np.asarray(got), want.numpy()


@pytest.mark.parametrize("name", ["bart", pytest.param("marian", marks=pytest.mark.slow)])
def test_float16_overflow_guard_exports_and_generates_as_transformers(
    tmp_path: pathlib.Path, name: str
) -> None:
    checkpoint = _save(name, tmp_path / "ckpt")
    assert main(["hf", str(checkpoint), "-o", str(tmp_path / "out"), "--dtype", "float16"]) == 0
    encoder = onnx.load(tmp_path / "out" / "encoder_model.onnx").graph
    layers = tf.AutoConfig.from_pretrained(checkpoint).encoder_layers
    ops = [n.op_type for n in encoder.node]
    assert ops.count("IsInf") == ops.count("Clip") == layers  # one select per encoder layer
    got, want = _greedy_both(checkpoint, tmp_path / "out")
    np.testing.assert_array_equal(got, want)
    assert len(set(want[:, 1:].reshape(-1).tolist())) > 2  # varied tokens, not one repeated


def test_t5_float16_keeps_wo_in_float32_and_generates_as_transformers(
    tmp_path: pathlib.Path,
) -> None:
    checkpoint = _save("t5", tmp_path / "ckpt")
    assert main(["hf", str(checkpoint), "-o", str(tmp_path / "out"), "--dtype", "float16"]) == 0
    for name in ("encoder_model.onnx", "decoder_model.onnx"):
        weights = onnx.load(tmp_path / "out" / name).graph.initializer
        by_module = {t.name: t.data_type for t in weights if len(t.dims) == 2}
        wo = [n for n in by_module if ".wo." in n]
        assert wo and all(by_module[n] == onnx.TensorProto.FLOAT for n in wo), name
        others = [t for n, t in by_module.items() if ".wo." not in n]
        assert others and all(t == onnx.TensorProto.FLOAT16 for t in others), name
    got, want = _greedy_both(checkpoint, tmp_path / "out")
    np.testing.assert_array_equal(got, want)
