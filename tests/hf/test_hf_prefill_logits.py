"""The default decoder's ``num_logits_to_keep``: every position by default, the last k when fed.

A prefill needs the last position's logits only; the head on every prompt position was a
fifth of a short prompt's work on a 32k vocabulary. Checked against eager PyTorch at the
export's example and at the edges (one token, one row, a left-padded batch, a past).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from onnx_export import hf
from onnx_export.hf.export._logits import LOGITS_TO_KEEP
from onnx_export.hf.runtime.generation import _batching
from tests.hf.conftest import Exported


def _session(exported: Exported) -> ort.InferenceSession:
    return ort.InferenceSession(
        str(exported.folder / "model.onnx"), providers=["CPUExecutionProvider"]
    )


def _feed(
    session: ort.InferenceSession, ids: np.ndarray, mask: np.ndarray
) -> dict[str, np.ndarray]:
    feed = {"input_ids": ids, "attention_mask": mask}
    names = {i.name for i in session.get_inputs()}
    if "position_ids" in names:
        feed["position_ids"] = np.where(mask == 1, mask.cumsum(axis=1) - 1, 1)
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            feed[i.name] = np.zeros((ids.shape[0], i.shape[1], 0, i.shape[3]), np.float32)
    return feed


def _eager(exported: Exported, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    positions = np.where(mask == 1, mask.cumsum(axis=1) - 1, 1)
    with torch.no_grad():
        out = exported.model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            position_ids=torch.from_numpy(positions),
        )
    return out.logits.numpy()


def test_the_default_graph_takes_num_logits_to_keep_with_a_default_of_every_position(
    exported: Callable[[str], Exported],
) -> None:
    case = exported("llama")
    model = onnx.load(case.folder / "model.onnx", load_external_data=False)
    initial = {t.name: t for t in model.graph.initializer}
    assert LOGITS_TO_KEEP in [i.name for i in model.graph.input]
    assert onnx.numpy_helper.to_array(initial[LOGITS_TO_KEEP]).tolist() == [0]


@pytest.mark.parametrize(
    "rows, length, padding",
    [(2, 7, 0), (1, 1, 0), (1, 5, 0), (3, 6, 2)],
    ids=["example", "one-token", "one-row", "left-padded"],
)
def test_the_last_k_positions_logits_equal_eager(
    exported: Callable[[str], Exported], rows: int, length: int, padding: int
) -> None:
    case = exported("llama")
    session = _session(case)
    rng = np.random.default_rng(rows * 10 + length)
    vocab = case.model.config.vocab_size
    ids = rng.integers(1, vocab, (rows, length)).astype(np.int64)
    mask = np.ones((rows, length), np.int64)
    mask[0, :padding] = 0  # the first row left-padded
    expected = _eager(case, ids, mask)
    feed = _feed(session, ids, mask)
    every = session.run(["logits"], feed)[0]  # not fed: every position, as before
    assert every.shape == (rows, length, vocab)
    np.testing.assert_allclose(every[mask == 1], expected[mask == 1], atol=1e-4, rtol=1e-4)
    for keep in sorted({1, min(2, length), length}):
        kept = session.run(["logits"], {**feed, LOGITS_TO_KEEP: np.array([keep], np.int64)})[0]
        assert kept.shape == (rows, keep, vocab)
        np.testing.assert_allclose(kept, every[:, length - keep :], atol=1e-5, rtol=1e-5)


def test_a_batched_prefill_keeps_one_position_and_tokens_stay_greedy(
    exported: Callable[[str], Exported], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    kept: list[int] = []
    run = model.session.run

    def counting(feed, outputs=None):  # type: ignore[no-untyped-def]
        results = run(feed, outputs)
        if feed["input_ids"].shape[1] > 1:  # a prefill
            kept.append(int(np.asarray(results["logits"].numpy()).shape[1]))
        return results

    monkeypatch.setattr(model.session, "run", counting)
    batcher = model.batcher()
    prompts = [[1, 5, 9, 13], [2, 7], [3, 8, 12, 40, 41]]
    ids = [batcher.submit(p, max_new_tokens=5) for p in prompts]
    done = {r.id: r.tokens for r in batcher.run()}
    assert kept == [1]  # one run for the three prompts, one position's logits
    monkeypatch.setattr(model.session, "run", run)
    for rid, prompt in zip(ids, prompts, strict=True):
        alone = model.generate([prompt], max_new_tokens=5)[0, len(prompt) :].tolist()
        assert done[rid] == alone
    assert len(prompts) <= _batching.PREFILL_ROWS
