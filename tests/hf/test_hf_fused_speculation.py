"""The fused ``target="onnxruntime"`` decoder: drafts verified and requests batched on it.

Its ``logits`` hold each row's last token for a prompt and a one-token step, and every new
token's in a step of several after a past (``passes/ort_gqa.py``): prompt lookup and
assistant drafts are verified on its shared cache, and ``batcher()`` keeps each request in
a slot of one shared buffer. Tokens are compared with plain greedy and transformers'.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from onnx_export import hf
from onnx_export.hf.runtime.generation import _batching
from onnx_export.hf.runtime.generation._generate import Stopping
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._speculative import LOGITS_TO_KEEP as RUNTIME_KEEP
from onnx_export.hf.runtime.generation._speculative import (
    ChunkRunner,
    DraftModel,
    speculative_decode,
)
from onnx_export.passes.ort_gqa import LOGITS_TO_KEEP
from tests.hf.test_hf_ort_target import _llama16

pytest.importorskip("transformers")

#: A prompt that repeats itself, as a summary that quotes its source.
REPEATING = [[1, 5, 9, 13, 17, 21, 5, 9, 13, 17, 21, 5, 9]]
PROMPTS = [[1, 5, 9, 13], [2, 7], [3, 8, 12, 40, 41, 42, 43, 44], [4], [9, 9, 9, 9, 9, 9]]


def _fused(root: pathlib.Path, seed: int = 0, **options: Any) -> tuple[Any, pathlib.Path]:
    torch.manual_seed(seed)
    model = _llama16() if seed == 0 else _reseeded(seed)
    hf.export_pretrained(model, root / "out", target="onnxruntime", **options)
    return model, root / "out"


def _reseeded(seed: int) -> Any:
    """The head-size-16 Llama with other weights (a draft model of the same vocabulary)."""
    model = _llama16()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    return model


@pytest.fixture(scope="module")
def fused(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, pathlib.Path]:
    return _fused(tmp_path_factory.mktemp("fused"))


@pytest.fixture(scope="module")
def draft(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, pathlib.Path]:
    return _fused(tmp_path_factory.mktemp("draft"), seed=7)


def _theirs(model: Any, prompt: list[list[int]], **kwargs: Any) -> np.ndarray:
    with torch.no_grad():
        out = model.generate(torch.tensor(prompt), do_sample=False, pad_token_id=0, **kwargs)
    return np.asarray(out.numpy())


def test_num_logits_to_keep_gives_the_last_positions_logits(
    fused: tuple[Any, pathlib.Path],
) -> None:
    """1 unless fed (declared (batch, 1, vocab)); k after a prompt or a past, as eager's."""
    model, folder = fused
    assert LOGITS_TO_KEEP == RUNTIME_KEEP
    graph = onnx.load(folder / "model.onnx", load_external_data=False).graph
    assert LOGITS_TO_KEEP in {i.name for i in graph.initializer}
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim][1:] == [1, 96]
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    sequence = REPEATING[0]
    with torch.no_grad():
        want = model(torch.tensor([sequence])).logits[0].numpy()
    for past, new, wanted in [(0, 13, 1), (0, 13, 5), (0, 13, 13), (6, 1, 1), (6, 4, 4)]:
        runner = ChunkRunner(ours.session, uses_positions=True, capacity=len(sequence))
        if past:
            runner.run(sequence[:past], 1)
        got = runner.run(sequence[past : past + new], wanted)
        end = past + new
        np.testing.assert_allclose(got, want[end - wanted : end], rtol=1e-4, atol=1e-4)
    # the plain steps after a verification get one position again
    runner = ChunkRunner(ours.session, uses_positions=True, capacity=len(sequence))
    runner.run(sequence[:8], 3)
    np.testing.assert_allclose(runner.run(sequence[8:9], 1), want[8:9], rtol=1e-4, atol=1e-4)
    # a padded batch of prompts without the input: each row's last token
    ids = np.array([sequence[:6], [*sequence[:4], 0, 0]])
    mask = np.array([[1] * 6, [1] * 4 + [0, 0]])
    logits = ours.session.run(
        {"input_ids": ids, "attention_mask": mask, "position_ids": np.zeros_like(ids)}
        | ours.session.empty_past(2),
        ["logits"],
    )["logits"].numpy()
    np.testing.assert_allclose(logits[:, 0], want[[5, 3]], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "settings",
    [{}, {"repetition_penalty": 1.3}, {"no_repeat_ngram_size": 3}],
    ids=["greedy", "repetition-penalty", "no-repeat-ngram"],
)
@pytest.mark.parametrize("k", [1, 4])
def test_prompt_lookup_on_the_fused_decoder_gives_plain_and_transformers_tokens(
    fused: tuple[Any, pathlib.Path], settings: dict[str, Any], k: int
) -> None:
    model, folder = fused
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    got = ours.generate(REPEATING, max_new_tokens=24, prompt_lookup_num_tokens=k, **settings)
    np.testing.assert_array_equal(got, ours.generate(REPEATING, max_new_tokens=24, **settings))
    theirs = _theirs(model, REPEATING, max_new_tokens=24, prompt_lookup_num_tokens=k, **settings)
    np.testing.assert_array_equal(got, theirs)


def test_a_fused_draft_model_gives_plain_and_transformers_tokens(
    fused: tuple[Any, pathlib.Path], draft: tuple[Any, pathlib.Path]
) -> None:
    model, folder = fused
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    small = hf.OrtModelForCausalLM.from_pretrained(draft[1])
    got = ours.generate(REPEATING, max_new_tokens=24, assistant_model=small)
    np.testing.assert_array_equal(got, ours.generate(REPEATING, max_new_tokens=24))
    theirs = _theirs(model, REPEATING, max_new_tokens=24, assistant_model=draft[0])
    np.testing.assert_array_equal(got, theirs)


def test_the_fused_model_as_its_own_draft_keeps_every_draft(
    fused: tuple[Any, pathlib.Path],
) -> None:
    """k + 1 tokens a step; both shared caches start small and grow (doubled) on the way."""
    _, folder = fused
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    drafter = DraftModel(ours.session, uses_positions=True, num_tokens=4)
    runner = ChunkRunner(ours.session, uses_positions=True, capacity=4)
    ids = np.array(REPEATING)
    tokens, stats = speculative_decode(
        runner, drafter, ids, TokenChooser(), Stopping.resolve(30, None, None)
    )
    np.testing.assert_array_equal(tokens, ours.generate(ids, max_new_tokens=30))
    assert stats.acceptance == 1.0 and stats.steps == 4 and stats.accepted == 26


def test_prompt_lookup_on_the_int4_fused_decoder_gives_its_plain_tokens(
    tmp_path: pathlib.Path,
) -> None:
    _, folder = _fused(tmp_path, quantize="int4")
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    plain = ours.generate(REPEATING, max_new_tokens=24)
    for k in (2, 5):
        got = ours.generate(REPEATING, max_new_tokens=24, prompt_lookup_num_tokens=k)
        np.testing.assert_array_equal(got, plain)
    requests = ours.batcher()
    ids = [requests.submit(p, max_new_tokens=8) for p in PROMPTS]
    done = {r.id: r.tokens for r in requests.run()}
    for rid, prompt in zip(ids, PROMPTS, strict=True):
        alone = ours.generate([prompt], max_new_tokens=8)[0, len(prompt) :]
        assert done[rid] == alone.tolist(), rid


def test_requests_batched_on_the_fused_decoder_get_their_own_tokens(
    fused: tuple[Any, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slots and capacity start small and double; rows join and leave while others decode."""
    monkeypatch.setattr(_batching, "_FIRST_SLOTS", 1)
    monkeypatch.setattr(_batching, "_FIRST_CAPACITY", 8)
    model, folder = fused
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    news = [6, 3, 9, 12, 20]
    batcher = ours.batcher()
    first = [batcher.submit(p, max_new_tokens=n) for p, n in zip(PROMPTS[:2], news, strict=False)]
    done: dict[int, list[int]] = {}
    late: list[int] = []
    for request in batcher.run():
        done[request.id] = request.tokens
        if not late:  # three more join once the first has left, while one is running
            late = [
                batcher.submit(p, max_new_tokens=n)
                for p, n in zip(PROMPTS[2:], news[2:], strict=True)
            ]
    assert batcher.steps < sum(news)  # rows shared steps
    for rid, prompt, new in zip(first + late, PROMPTS, news, strict=True):
        expected = _theirs(model, [prompt], max_new_tokens=new)[0, len(prompt) :]
        assert done[rid] == expected.tolist(), rid
        assert done[rid] == ours.generate([prompt], max_new_tokens=new)[0, len(prompt) :].tolist()


def test_an_end_token_retires_a_fused_row_early(fused: tuple[Any, pathlib.Path]) -> None:
    _, folder = fused
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    greedy = ours.generate([PROMPTS[0]], max_new_tokens=10)[0, len(PROMPTS[0]) :].tolist()
    eos = greedy[3]
    batcher = ours.batcher()
    ids = [batcher.submit(p, max_new_tokens=10, eos_token_id=eos) for p in PROMPTS]
    done = {r.id: r.tokens for r in batcher.run()}
    for rid, prompt in zip(ids, PROMPTS, strict=True):
        alone = ours.generate([prompt], max_new_tokens=10, eos_token_id=eos)[0, len(prompt) :]
        tokens = alone.tolist()
        if eos in tokens:
            tokens = tokens[: tokens.index(eos) + 1]
        assert done[rid] == tokens, rid
    assert done[ids[0]][-1] == eos and len(done[ids[0]]) <= 4


def test_a_request_past_the_models_positions_is_refused(fused: tuple[Any, pathlib.Path]) -> None:
    _, folder = fused
    batcher = hf.OrtModelForCausalLM.from_pretrained(folder).batcher()
    with pytest.raises(hf.GenerationError, match="pass the model's 64 positions"):
        batcher.submit([1, 2, 3], max_new_tokens=62)


def test_drafts_are_verified_on_per_step_presents_too(fused: tuple[Any, pathlib.Path]) -> None:
    """Without the shared buffer (another device) chunks run on the session's presents."""
    _, folder = fused
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    plain = ours.generate(REPEATING, max_new_tokens=20)
    ours.session.shares_buffer = False
    got = ours.generate(REPEATING, max_new_tokens=20, prompt_lookup_num_tokens=4)
    np.testing.assert_array_equal(got, plain)
    with pytest.raises(hf.GenerationError, match="cannot bind one"):
        ours.batcher()
