"""``quantize="int8"`` on a decoder: int8 weights per column, activations per row.

``quantize_dynamic`` (the encoders' int8) gives an activation tensor one scale, so a row
decoded in a batch got other tokens than alone; a decoder's int8 (``_int8_rows.py``)
scales each row by itself. Checked against eager PyTorch at the example and at the edges
(one token, one row, a left-padded batch), on the default and the fused decoder, and
batched rows against the same rows alone, bit for bit.
"""

from __future__ import annotations

import collections
import pathlib

import numpy as np
import onnx
import pytest
import torch

from onnx_export import hf

tf = pytest.importorskip("transformers")

from tests.hf.test_hf_quantize import _llama  # noqa: E402  # the same tiny Llama


@pytest.fixture(scope="module")
def eager() -> tf.LlamaForCausalLM:
    return _llama()


@pytest.fixture(scope="module", params=["onnx", "onnxruntime"], ids=["default", "fused"])
def folder(
    request: pytest.FixtureRequest,
    eager: tf.LlamaForCausalLM,
    tmp_path_factory: pytest.TempPathFactory,
) -> pathlib.Path:
    out = tmp_path_factory.mktemp(f"int8-{request.param}") / "q8"
    hf.export_pretrained(eager, out, quantize="int8", target=request.param)
    return out


def test_every_linear_layer_is_an_integer_matmul_scaled_per_row(folder: pathlib.Path) -> None:
    graph = onnx.load(folder / "model.onnx").graph
    ops = collections.Counter(n.op_type for n in graph.node)
    weights = {t.name for t in graph.initializer}
    float_linear = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    assert not float_linear  # the head too
    assert ops["MatMulInteger"] >= 2 * 4 + 1  # packed or not, every layer's and the head
    assert "DynamicQuantizeLinear" not in ops  # no scale shared by the rows of a batch
    assert ops["ReduceMax"] >= ops["MatMulInteger"]  # a row scale each (the graph may have more)


@pytest.mark.parametrize(
    "rows, length, padding",
    [(2, 12, 0), (1, 1, 0), (1, 7, 0), (3, 9, 4)],
    ids=["example", "one-token", "one-row", "left-padded"],
)
def test_the_logits_are_close_to_eager(
    folder: pathlib.Path, eager: tf.LlamaForCausalLM, rows: int, length: int, padding: int
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    ids = torch.randint(1, 128, (rows, length), generator=torch.Generator().manual_seed(length))
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, :padding] = 0  # the first row left-padded for eager; the batcher pads its own way
    logits = _last_logits(model, ids.numpy(), mask.numpy())
    with torch.no_grad():
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        want = eager(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
    want = want.numpy()
    norms = np.linalg.norm(logits, axis=-1) * np.linalg.norm(want, axis=-1)
    cosine = (logits * want).sum(-1) / norms
    assert cosine.min() > 0.99, cosine  # int8 weights and activations: close, not equal
    error = np.abs(logits - want).max() / np.abs(want).max()
    assert error < 0.1, error


def _last_logits(model: hf.OrtModelForCausalLM, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each row's last real token's logits, through the batcher's own prefill."""
    batcher = model.batcher()
    prompts = [row[m == 1].tolist() for row, m in zip(ids, mask, strict=True)]
    seen: dict[int, np.ndarray] = {}

    def keep(index: int):  # type: ignore[no-untyped-def]
        def choose(logits: np.ndarray) -> int:
            seen.setdefault(index, np.array(logits))
            return int(logits.argmax())

        return choose

    for index, prompt in enumerate(prompts):
        batcher.submit(prompt, max_new_tokens=1, choose=keep(index))
    list(batcher.run())
    return np.stack([seen[i] for i in range(len(prompts))])


def test_rows_decoded_together_get_their_tokens_alone(folder: pathlib.Path) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 128, n).tolist() for n in (5, 9, 3, 12, 7, 1)]
    batcher = model.batcher()
    ids = [batcher.submit(p, max_new_tokens=8) for p in prompts]
    done = {r.id: r.tokens for r in batcher.run()}
    for rid, prompt in zip(ids, prompts, strict=True):
        alone = model.generate([prompt], max_new_tokens=8)[0, len(prompt) :].tolist()
        assert done[rid] == alone, rid
