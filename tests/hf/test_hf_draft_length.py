"""How many drafts a step verifies (``DraftLength``) and prompt lookup's n-gram index.

The schedule only chooses how many of prompt lookup's drafts a step runs; the tokens are
plain greedy's whatever it chooses, on the default graph and on the fused (fp32 and int4)
decoders, with an EOS id, a streamer and a budget that ends inside a step.
"""

from __future__ import annotations

import pathlib
import random
from typing import Any

import numpy as np
import pytest

from onnx_export import hf
from onnx_export.hf.runtime.generation._generate import Stopping
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._speculative import (
    ChunkRunner,
    DraftLength,
    DraftModel,
    PromptLookup,
    speculative_decode,
)
from tests.hf.test_hf_fused_speculation import REPEATING, _fused

pytest.importorskip("transformers")


def _scan(sequence: list[int], count: int, num_tokens: int, max_ngram: int) -> list[int]:
    """The rule by a full scan: the latest earlier n-gram, longest n first (transformers
    takes the earliest); past the sequence's end, the sequence with its drafts goes on
    with the same shift."""
    length, count = len(sequence), min(count, num_tokens)
    for size in range(min(max_ngram, length - 1), 0, -1):
        tail = sequence[length - size :]
        for start in range(length - size - 1, -1, -1):
            if sequence[start : start + size] == tail:
                shift, extended = length - start - size, list(sequence)
                while len(extended) < length + count:
                    extended.append(extended[len(extended) - shift])
                return extended[length : length + count]
    return []


def test_prompt_lookup_index_gives_the_scans_drafts_as_the_sequence_grows() -> None:
    assert PromptLookup(4).propose([7, 1, 1], 4) == [1, 1, 1, 1]  # a run goes on
    assert PromptLookup(3).propose([1, 2, 3, 1, 2], 3) == [3, 1, 2]
    # the latest earlier "1, 2" wins (transformers' earliest would give 9, 1, 2)
    assert PromptLookup(3).propose([1, 2, 9, 1, 2, 8, 1, 2], 3) == [8, 1, 2]
    rng = random.Random(0)
    for _ in range(200):
        lookup = PromptLookup(rng.randint(1, 6), rng.randint(1, 4))
        sequence = [rng.randint(0, 5) for _ in range(rng.randint(1, 5))]
        for _ in range(20):
            count = rng.randint(1, 8)
            want = _scan(sequence, count, lookup.num_tokens, lookup.max_ngram)
            assert lookup.propose(sequence, count) == want, sequence
            sequence.extend(rng.randint(0, 5) for _ in range(rng.randint(1, 3)))
        # another list (or one changed in place) starts the index over
        copy = list(sequence)
        copy[-2] = 9
        assert lookup.propose(copy, 3) == _scan(copy, 3, lookup.num_tokens, lookup.max_ngram)


def test_draft_length_verifies_the_drafts_that_pay_off() -> None:
    cheap = DraftLength()
    assert cheap.length(6) == 0  # no step timed yet: a one-token step first
    cheap.record(1, 0.010, 1, False)
    for _ in range(4):  # a draft adds 5% of a step and all are kept: every draft
        cheap.record(7, 0.013, 6, False)
    assert cheap.acceptance > 0.9 and cheap.length(6) == 6

    costly = DraftLength()
    for _ in range(4):  # each draft costs as much as a step, and half are kept
        costly.record(1, 0.010, 0, True)
        costly.record(3, 0.030, 1, True)
    assert costly.length(4) == 0
    single, extra = costly.costs() or (0.0, 0.0)
    assert single == pytest.approx(0.010) and extra == pytest.approx(0.010)

    # drafts between: kept at 0.9 a draft, each adds 30% of a step: a few, not all
    some = DraftLength(decay=1.0)
    some._kept, some._missed = 9.0, 1.0
    for _ in range(3):
        some.record(1, 0.010, 0, False)
        some.record(5, 0.022, 0, False)
    assert 0 < some.length(16) < 16


def test_draft_length_ignores_a_slow_step_and_tries_a_draft_after_idle_steps() -> None:
    schedule = DraftLength()
    for seconds in (0.010, 0.011, 0.500):  # the last one was slowed by something else
        schedule.record(1, seconds, 0, True)
    for seconds in (0.012, 0.012, 0.900):
        schedule.record(3, seconds, 0, True)
    assert schedule.costs() == pytest.approx((0.010, 0.001))
    bad = DraftLength()
    for _ in range(4):
        bad.record(1, 0.010, 0, True)
        bad.record(2, 0.020, 0, True)
    assert [bad.length(3) for _ in range(9)] == [0] * 8 + [1]  # the ninth tries one


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("draft-length")
    _, fused = _fused(root / "fp32")
    _, int4 = _fused(root / "int4", quantize="int4")
    return {"fused": fused, "int4": int4}


@pytest.mark.parametrize("kind", ["fused", "int4"])
def test_scheduled_prompt_lookup_gives_plain_greedy_tokens(
    folders: dict[str, pathlib.Path], kind: str
) -> None:
    """generate() verifies a scheduled number of drafts; EOS, streamer and budget as plain."""
    ours = hf.OrtModelForCausalLM.from_pretrained(folders[kind])
    plain = ours.generate(REPEATING, max_new_tokens=40, eos_token_id=[])
    for k in (1, 3, 8):
        got = ours.generate(
            REPEATING, max_new_tokens=40, eos_token_id=[], prompt_lookup_num_tokens=k
        )
        np.testing.assert_array_equal(got, plain)
    new = plain[0, len(REPEATING[0]) :].tolist()
    eos = new[len(new) // 2]
    streamed: list[int] = []
    got = ours.generate(
        REPEATING,
        max_new_tokens=40,
        eos_token_id=eos,
        prompt_lookup_num_tokens=6,
        streamer=lambda t: streamed.append(int(t[0])),
    )
    want = ours.generate(REPEATING, max_new_tokens=40, eos_token_id=eos)
    np.testing.assert_array_equal(got, want)
    assert streamed == got[0, len(REPEATING[0]) :].tolist() and streamed[-1] == eos
    # a budget that ends inside a verification step
    for budget in (1, 2, 7):
        got = ours.generate(REPEATING, max_new_tokens=budget, prompt_lookup_num_tokens=8)
        np.testing.assert_array_equal(got, ours.generate(REPEATING, max_new_tokens=budget))


def test_a_schedule_counts_what_it_verifies(folders: dict[str, pathlib.Path]) -> None:
    """Each step adds its kept drafts and one token; drafts are verified once timed."""
    ours = hf.OrtModelForCausalLM.from_pretrained(folders["int4"])
    ids = np.array(REPEATING)
    seen: list[Any] = []
    runner = ChunkRunner(ours.session, uses_positions=True, capacity=4)  # grows on the way
    schedule = DraftLength()
    tokens, stats = speculative_decode(
        runner,
        PromptLookup(8),
        ids,
        TokenChooser(),
        Stopping.resolve(40, [], None),
        schedule=schedule,
        on_step=lambda s: seen.append((s.proposed, s.accepted)),
    )
    np.testing.assert_array_equal(tokens, ours.generate(ids, max_new_tokens=40, eos_token_id=[]))
    assert stats.steps + stats.accepted == 40 and stats.accepted <= stats.proposed
    assert seen[0] == (0, 0)  # the prompt's step verifies none: nothing is timed yet
    assert schedule.costs() is not None


@pytest.mark.parametrize("kind", ["fused", "int4"])
def test_chunks_of_one_length_reuse_the_bound_ids_and_give_fresh_logits(
    folders: dict[str, pathlib.Path], kind: str
) -> None:
    """A shared cache writes each chunk's tokens into one bound buffer: a chunk as long as
    the last one (bound once) still runs its own tokens, as a runner that never saw the
    others; so do one-token steps and a chunk after several of other lengths."""
    ours = hf.OrtModelForCausalLM.from_pretrained(folders[kind])
    # GQA rotates at the cache's positions: position_ids is bound once, not per chunk
    assert ours.session.shares_buffer and "position_ids" in ours.session.unread_inputs
    prompt = REPEATING[0]

    def fresh(tokens: list[int], wanted: int) -> np.ndarray:
        runner = ChunkRunner(ours.session, uses_positions=True, capacity=32)
        runner.run(prompt, 1)
        return runner.run(tokens, wanted).copy()

    runner = ChunkRunner(ours.session, uses_positions=True, capacity=32)
    runner.run(prompt, 1)
    for tokens in ([3, 4, 5], [7, 8, 9], [11, 12, 13], [2], [6], [3, 4, 5, 6, 7], [8, 9, 10]):
        runner.cut(len(prompt))
        got = runner.run(tokens, len(tokens)).copy()
        np.testing.assert_allclose(got, fresh(tokens, len(tokens)), rtol=1e-5, atol=1e-5)
        assert runner.cached == len(prompt) + len(tokens)
    # a step after a kept chunk continues it: positions and mask follow the cache
    runner.cut(len(prompt))
    runner.run([3, 4, 5], 3)
    got = runner.run([6], 1).copy()
    want = fresh([3, 4, 5, 6], 4)[-1:]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["fused", "int4"])
def test_edges_give_plain_greedy_tokens(folders: dict[str, pathlib.Path], kind: str) -> None:
    """No n-gram to draft from, a budget that caps the drafts, an EOS among kept drafts."""
    ours = hf.OrtModelForCausalLM.from_pretrained(folders[kind])
    # a prompt of distinct tokens: nothing to draft from at first (then what it makes)
    distinct = [list(range(1, 12))]
    assert PromptLookup(4).propose(distinct[0], 4) == []
    for budget in (1, 2, 9):
        got = ours.generate(distinct, max_new_tokens=budget, prompt_lookup_num_tokens=4)
        np.testing.assert_array_equal(got, ours.generate(distinct, max_new_tokens=budget))
    # every offered draft verified (no schedule): the drafts offered never run past the
    # budget, which may end anywhere in a step
    ids = np.array(REPEATING)
    plain = ours.generate(ids, max_new_tokens=30, eos_token_id=[])
    for budget in (3, 11, 30):
        tokens, stats = speculative_decode(
            ChunkRunner(ours.session, uses_positions=True),
            PromptLookup(8),
            ids,
            TokenChooser(),
            Stopping.resolve(budget, [], None),
        )
        np.testing.assert_array_equal(tokens, plain[:, : ids.shape[1] + budget])
        assert stats.steps + stats.accepted == budget
    # the model as its own draft keeps every draft (the first step after the prompt's
    # verifies 4, kept as new tokens 1-4): an EOS first made there, as a kept draft with
    # drafts after it, ends the row there
    new = plain[0, ids.shape[1] :].tolist()
    inside = [i for i in range(1, 4) if new[i] not in new[:i]]
    assert inside, new
    eos, end = new[inside[0]], inside[0] + 1
    tokens, stats = speculative_decode(
        ChunkRunner(ours.session, uses_positions=True),
        DraftModel(ours.session, uses_positions=True, num_tokens=4),
        ids,
        TokenChooser(),
        Stopping.resolve(30, [eos], None),
    )
    np.testing.assert_array_equal(tokens, plain[:, : ids.shape[1] + end])
    np.testing.assert_array_equal(tokens, ours.generate(ids, max_new_tokens=30, eos_token_id=eos))
    assert stats.steps + stats.accepted == end and stats.proposed > stats.accepted
