"""Speculative decoding: draft k tokens cheaply, verify them in one step of the model.

Under transformers' names: ``prompt_lookup_num_tokens=k`` drafts up to k tokens that
followed the last n-gram's latest earlier occurrence (n from ``max_matching_ngram_size``,
2 by default, down to 1, as transformers' ``PromptLookupCandidateGenerator``, which takes
the earliest; past the sequence's end they go on with the same shift), and
:class:`DraftLength` says how many of them a step verifies (those that pay off, from the
measured step costs);
``assistant_model=`` drafts them greedily with a smaller exported model of the same
vocabulary (``num_assistant_tokens``, 5 by default, then grown by 2 when a whole draft is
accepted and shrunk by 1 when not: transformers' "heuristic" schedule).

The model then runs the pending token and the k drafts as one chunk through the same
graph with its past, which gives the logits after each of them. Walking them in order,
the logits processors and the greedy choice run as in plain decoding; a draft is kept
while it equals the token chosen, and the first token that differs is the model's own.
Each step thus adds between 1 and k + 1 tokens, always the tokens plain greedy decoding
gives, and the cache is cut back to the tokens kept. Greedy only, one row. The default
``target="onnx"`` graph gives every position's logits; the fused ``target="onnxruntime"``
decoder gives the last ``num_logits_to_keep`` (an input of default 1), and ORT's
GroupQueryAttention takes several new tokens on a past for one row, so the drafts are
verified on its shared cache, where cutting back is lowering the count of tokens it holds
(``seqlens_k``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._session import StepSession, Value, host_float32
from onnx_export.hf.runtime.generation._generate import Stopping, Streamer
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._shared_cache import SharedCache

#: The fused decoder's input saying how many of each row's last positions ``logits`` holds
#: (``passes/ort_gqa.py``'s ``LOGITS_TO_KEEP``, written down here: the runtime imports
#: neither the exporter nor onnx_ir).
LOGITS_TO_KEEP = "num_logits_to_keep"

#: A chunk runner's first shared cache's positions, when it is not told (then doubled).
_FIRST_CAPACITY = 64

__all__ = [
    "LOGITS_TO_KEEP",
    "ChunkRunner",
    "Drafter",
    "PromptLookup",
    "DraftModel",
    "DraftLength",
    "SpeculationStats",
    "check_speculation",
    "keeps_logits",
    "DraftSource",
    "make_drafter",
    "speculative_decode",
]


def keeps_logits(session: StepSession) -> bool:
    """Whether the graph takes ``num_logits_to_keep`` (the fused decoder: 1 unless fed).

    Such a graph gives each row's last ``num_logits_to_keep`` positions' logits
    (``passes/ort_gqa.py``); the default graph gives every position's.
    """
    names = {value.name for value in session.session.get_overridable_initializers()}
    return LOGITS_TO_KEEP in names


class ChunkRunner:
    """A session (one row) with its cache: runs chunks of tokens, cuts the cache back.

    On a fused decoder (``session.shares_buffer``) the cache is one :class:`SharedCache`
    (grown when full), and cutting it back only lowers the count of tokens it holds: the
    next chunk overwrites the rest. Its logits cover the positions asked for
    (``num_logits_to_keep``), the default graph's every position.

    Attributes:
        cached: How many tokens the cache holds.

    Example:
        >>> runner = ChunkRunner(session, uses_positions=True)  # doctest: +SKIP
        >>> runner.run([1, 2, 3]).shape  # doctest: +SKIP
        (3, 96)
    """

    def __init__(
        self, session: StepSession, *, uses_positions: bool, capacity: int | None = None
    ) -> None:
        self._session = session
        self._uses_positions = uses_positions
        # GQA rotating at the cache's positions never reads them: a shared cache binds them once
        self._moves = uses_positions and "position_ids" not in session.unread_inputs
        self._keeps = keeps_logits(session)
        self._shared: SharedCache | None = None
        self._capacity = capacity or _FIRST_CAPACITY
        self._past: dict[str, Value] = {} if session.shares_buffer else session.empty_past(1)
        self.cached = 0

    def run(self, tokens: list[int], wanted: int | None = None) -> npt.NDArray[np.float32]:
        """The logits after each of the last ``wanted`` (all) ``tokens``; the cache holds them.

        On a shared cache the result is a view of its logits buffer, valid until the next
        run (copy what must outlive it).
        """
        wanted = len(tokens) if wanted is None else wanted
        total = self.cached + len(tokens)
        if self._session.shares_buffer:
            cache = self._shared
            if cache is None or cache.capacity < total:
                cache = self._shared_for(total)
            keep = wanted if self._keeps else 1
            logits = cache.run_chunk(tokens, self.cached, keep, self._moves)
        else:
            feed: dict[str, Any] = {
                "input_ids": np.array([tokens], np.int64),
                "attention_mask": np.ones((1, total), np.int64),
            }
            if self._uses_positions:
                feed["position_ids"] = np.arange(self.cached, total, dtype=np.int64)[None]
            if self._keeps and wanted > 1:
                feed[LOGITS_TO_KEEP] = np.array([wanted], np.int64)
            results = self._session.run({**feed, **self._past})
            self._past = self._session.next_past(results)
            logits = host_float32(results["logits"])[0]
        self.cached = total
        rows = logits.shape[0]
        if rows < wanted:
            raise GenerationError(
                f"The decoder gave {rows} positions' logits, {wanted} were needed: "
                "export the folder again with this version (its fused decoder gives the "
                "logits of every draft) or with the default target."
            )
        if rows == wanted and logits.dtype == np.float32:
            return logits
        return np.ascontiguousarray(logits[rows - wanted :], dtype=np.float32)

    def _shared_for(self, total: int) -> SharedCache:
        """The shared cache, grown (doubled) to hold ``total`` positions."""
        cache = self._shared
        if cache is None or cache.capacity < total:
            capacity = max(total, 2 * cache.capacity if cache else self._capacity)
            if cache is None:
                cache = SharedCache(self._session, 1, capacity)
            else:
                cache = cache.grown(capacity, self.cached)
            self._shared = cache
        return cache

    def cut(self, length: int) -> None:
        """Keep the cache's first ``length`` tokens."""
        if length >= self.cached:
            return
        if not self._session.shares_buffer:  # a shared cache is read up to the mask only
            self._past = (
                self._session.slice_past(self._past, length)
                if length
                else self._session.empty_past(1)
            )
        self.cached = length


class Drafter(Protocol):
    """What drafts tokens: :class:`PromptLookup` or :class:`DraftModel`."""

    def propose(self, sequence: list[int], count: int) -> list[int]:
        """Up to ``count`` tokens to follow ``sequence``."""

    def accepted(self, proposed: int, kept: int) -> None:
        """How many of the last proposal were kept (to size the next)."""


@dataclasses.dataclass
class PromptLookup:
    """Drafts from the sequence itself: what followed the last n-gram earlier on.

    The n-grams' latest places are kept in a dictionary per size and updated as the
    sequence grows (the same list, appended to), so a proposal costs a few look-ups
    whatever the sequence's length; another list starts the index over.

    Example:
        >>> PromptLookup(num_tokens=3).propose([5, 6, 7, 8, 5, 6], 3)
        [7, 8, 5]
        >>> PromptLookup(num_tokens=5).propose([1, 2, 3, 2, 3], 5)  # 2, 3 repeats
        [2, 3, 2, 3, 2]
    """

    num_tokens: int
    max_ngram: int = 2
    _places: list[dict[tuple[int, ...], int]] = dataclasses.field(
        default_factory=list, init=False, repr=False, compare=False
    )
    _source: list[int] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    _seen: int = dataclasses.field(default=0, init=False, repr=False, compare=False)
    _last: int = dataclasses.field(default=-1, init=False, repr=False, compare=False)

    def propose(self, sequence: list[int], count: int) -> list[int]:
        """As transformers' ``PromptLookupCandidateGenerator``, but the latest match wins.

        transformers takes the earliest earlier occurrence of the n-gram; the latest one
        is the text the sequence is in now (a loop it fell into, the passage it quotes),
        and its drafts were kept more often: in ``bench/bench_prompt_lookup.py``'s replays
        of six greedy decodings, as fast or faster in each (``docs/performance.md``).
        Where the tokens after the match reach the sequence's end, transformers' drafts
        stop; these go on with the drafts themselves (the text after the match repeats
        with the same shift, as in a loop). The tokens made do not depend on either.
        """
        length, count = len(sequence), min(count, self.num_tokens)
        if count < 1:
            return []
        self._index(sequence)
        for size in range(min(self.max_ngram, length - 1), 0, -1):
            found = self._places[size - 1].get(tuple(sequence[length - size :]))
            if found is not None:
                start = found + size
                if start + count <= length:
                    return sequence[start : start + count]
                shift = sequence[start:]  # the shift that matched repeats: a loop
                return (shift * (count // len(shift) + 1))[:count]
        return []

    def _index(self, sequence: list[int]) -> None:
        """Record the latest place of each n-gram that ends before the last token."""
        length, seen = len(sequence), self._seen
        if (
            sequence is not self._source
            or length < seen
            or (seen and sequence[seen - 1] != self._last)
        ):
            self._places = [{} for _ in range(self.max_ngram)]
            self._source, seen = sequence, 0
        for size, places in enumerate(self._places, start=1):
            # windows starting at p, p + size <= length - 1, not recorded before: in order,
            # so a later place of the same n-gram replaces an earlier one
            for p in range(max(0, seen - size), length - size):
                places[tuple(sequence[p : p + size])] = p
        self._seen, self._last = length, sequence[length - 1] if length else -1

    def accepted(self, proposed: int, kept: int) -> None:
        """Prompt lookup keeps its size."""


class DraftModel:
    """Drafts greedily with a smaller model's own session and cache.

    Example:
        >>> drafter = DraftModel(small.session, uses_positions=True)  # doctest: +SKIP
    """

    def __init__(self, session: StepSession, *, uses_positions: bool, num_tokens: int = 5):
        self._runner = ChunkRunner(session, uses_positions=uses_positions)
        self._tokens: list[int] = []  # what the draft's cache holds
        self.num_tokens = num_tokens

    def propose(self, sequence: list[int], count: int) -> list[int]:
        """Up to ``count`` (and the current draft size) greedy tokens of the draft model."""
        count = min(count, self.num_tokens)
        if count < 1:
            return []
        same = 0
        for a, b in zip(self._tokens, sequence, strict=False):
            if a != b:
                break
            same += 1
        same = min(same, len(sequence) - 1)  # the last token reruns for its logits
        self._runner.cut(same)
        self._tokens = list(sequence)
        logits = self._runner.run(sequence[same:], 1)
        drafts: list[int] = []
        while True:
            drafts.append(int(logits[-1].argmax()))
            if len(drafts) == count:
                return drafts
            self._tokens.append(drafts[-1])
            logits = self._runner.run(drafts[-1:], 1)

    def accepted(self, proposed: int, kept: int) -> None:
        """As transformers' "heuristic" schedule: +2 after a whole draft was kept, else -1."""
        if proposed:
            self.num_tokens = (
                self.num_tokens + 2 if kept == proposed else max(1, self.num_tokens - 1)
            )


@dataclasses.dataclass
class SpeculationStats:
    """How a speculative decoding went.

    Attributes:
        steps: The model's runs (each verifies one chunk).
        proposed: Draft tokens proposed in all.
        accepted: Draft tokens kept.

    Example:
        >>> SpeculationStats(steps=4, proposed=12, accepted=9).acceptance
        0.75
    """

    steps: int = 0
    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        """The share of proposed tokens kept (0 when none was proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0


def check_speculation(
    session: StepSession,
    rows: int,
    mask: npt.NDArray[np.int64],
    chooser: TokenChooser,
    *,
    verifies: bool = True,
) -> None:
    """A :class:`GenerationError` when speculation cannot give plain decoding's tokens.

    ``verifies``: the session verifies drafts (it needs their logits), not drafts them.
    """
    if chooser.do_sample:
        raise GenerationError(
            "prompt_lookup_num_tokens= and assistant_model= decode greedily here: drop "
            "do_sample=True (or the speculation)."
        )
    if rows != 1 or not mask.all():
        raise GenerationError(
            "Speculative decoding takes one unpadded prompt (as transformers' assisted "
            f"generation), got {rows} rows: call generate once per prompt."
        )
    shape = session.output_meta("logits").shape
    if verifies and len(shape) == 3 and shape[1] == 1 and not keeps_logits(session):
        raise GenerationError(
            "This folder's decoder returns each row's last logits only (a fused "
            "target='onnxruntime' decoder exported before it gave the drafts' logits), and "
            "verifying drafts needs them: export the folder again with this version."
        )


@dataclasses.dataclass(frozen=True)
class DraftSource:
    """A draft model's session, whether it takes positions, and (ours, its) vocabularies.

    Example:
        >>> DraftSource(small.session, True, (32000, 32000))  # doctest: +SKIP
    """

    session: StepSession
    uses_positions: bool
    vocabularies: tuple[Any, Any]


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GenerationError(f"{name} must be an int >= 1, got {value!r}.")
    return value


def make_drafter(
    session: StepSession,
    rows: int,
    mask: npt.NDArray[np.int64],
    chooser: TokenChooser,
    *,
    beams: int,
    lookup: int | None,
    ngram: int,
    assistant: DraftSource | None,
    assistant_tokens: int,
) -> Drafter | None:
    """The drafter generate()'s keywords ask for (``None``: no speculation), checked."""
    if lookup is None and assistant is None:
        return None
    if lookup is not None and assistant is not None:
        raise GenerationError("Pass prompt_lookup_num_tokens= or assistant_model=, not both.")
    if beams > 1:
        raise GenerationError("Speculative decoding is greedy: drop num_beams.")
    check_speculation(session, rows, mask, chooser)
    if assistant is None:
        count = _whole("prompt_lookup_num_tokens", lookup)
        return PromptLookup(count, _whole("max_matching_ngram_size", ngram))
    ours, theirs = assistant.vocabularies
    if ours != theirs:
        raise GenerationError(
            f"assistant_model has a vocabulary of {theirs} tokens, this model {ours}: "
            "the draft model must share the tokenizer."
        )
    count = _whole("num_assistant_tokens", assistant_tokens)
    check_speculation(assistant.session, 1, mask, chooser, verifies=False)
    return DraftModel(assistant.session, uses_positions=assistant.uses_positions, num_tokens=count)


class DraftLength:
    """How many of a step's drafts to verify: the count giving the most tokens a second.

    A step of ``1 + d`` tokens (the pending one and ``d`` drafts) is taken to cost
    ``single + d * extra`` seconds: ``single`` the fastest of the last one-token steps,
    ``extra`` the least that a token added in the last steps with drafts (the fastest, so
    that a step slowed by something else running does not count). Drafts are kept one
    after another with the chance ``p`` seen so far (recent steps weigh more; a draft left
    out is still compared with the token the step made), so ``d`` drafts are worth
    ``1 + p + ... + p**d`` tokens. The ``d`` with the most
    tokens a second wins; 0 is a plain one-token step. Where a chunk of several tokens
    costs little more than one (a large model, memory-bound) this verifies every draft;
    where each token adds much (a small int4 model on a CPU) only well-kept drafts. Until
    a one-token step was timed (the prompt's step included), no draft is verified: drafts
    cost as much at the prompt's step as later, and nothing is known of them yet; after
    eight steps without drafts in a row, one draft is tried (the costs are timed again).
    The tokens do not depend on it: each step gives plain greedy's tokens.

    Attributes:
        decay: How much the acceptance seen before weighs at each step.

    Example:
        >>> schedule = DraftLength()
        >>> schedule.length(4)  # nothing measured yet: a one-token step first
        0
        >>> for _ in range(3):
        ...     schedule.record(1, 0.001, 0, True)  # the first draft was wrong
        ...     schedule.record(5, 0.004, 0, True)  # 0.75 ms a draft, and none is kept
        >>> schedule.length(4)
        0
    """

    def __init__(self, decay: float = 0.5) -> None:
        self.decay = decay
        self._single: list[float] = []  # the last one-token steps' seconds
        self._chunks: list[tuple[int, float]] = []  # the last steps with drafts
        self._kept, self._missed = 3.0, 1.0  # a prior of 0.75 a draft
        self._idle = 0  # steps in a row that verified no draft though some were offered

    @property
    def acceptance(self) -> float:
        """The estimated chance that a draft is kept when the ones before it were."""
        return self._kept / (self._kept + self._missed)

    def costs(self) -> tuple[float, float] | None:
        """(a one-token step's seconds, what a draft adds); ``None`` before a one-token step."""
        if not self._single:
            return None
        single = min(self._single)
        if not self._chunks:
            return single, 0.2 * single  # a guess until a step with drafts is timed
        extra = min((seconds - single) / (tokens - 1) for tokens, seconds in self._chunks)
        return single, max(0.0, extra)

    def length(self, available: int) -> int:
        """How many of ``available`` drafts the next step verifies."""
        costs = self.costs()
        if costs is None:
            return 0
        if self._idle >= 8:
            self._idle = 0
            return min(1, available)
        single, extra = costs
        p, best, best_rate = self.acceptance, 0, 0.0
        worth, term = 0.0, 1.0
        for drafts in range(available + 1):
            worth += term  # 1 + p + ... + p**drafts tokens
            term *= p
            rate = worth / max(single + drafts * extra, 1e-9)
            if rate <= best_rate:  # the rate rises to its one peak, then falls
                break
            best, best_rate = drafts, rate
        self._idle = self._idle + 1 if best == 0 and available else 0
        return best

    def record(self, tokens: int, seconds: float, matched: int, missed: bool) -> None:
        """A step of ``tokens`` tokens took ``seconds``; what it showed of the drafts.

        ``matched``: how many of the proposal's first drafts equal the tokens the step
        made, ``missed``: whether the next one differs (drafts left out of the step are
        compared too: a one-token step still shows whether the first draft was right).
        """
        if tokens == 1:
            self._single.append(seconds)
            del self._single[:-8]
        else:
            self._chunks.append((tokens, seconds))
            del self._chunks[:-16]
        if matched or missed:
            self._kept = self.decay * self._kept + matched
            self._missed = self.decay * self._missed + missed


def _greedy_tokens(
    logits: npt.NDArray[np.float32], drafts: list[int], room: int, ends: frozenset[int]
) -> list[int]:
    """A plain greedy step's tokens: the drafts equal to the largest logits, then its own.

    At most ``room`` tokens, and none after an EOS id.
    """
    greedy: list[int] = logits.argmax(axis=-1).tolist()
    count = 1
    while count <= len(drafts) and greedy[count - 1] == drafts[count - 1]:
        count += 1
    new = greedy[: min(count, room)]
    for j, token in enumerate(new):
        if token in ends:
            return new[: j + 1]
    return new


def speculative_decode(
    runner: ChunkRunner,
    drafter: Drafter,
    start: npt.NDArray[np.int64],
    chooser: TokenChooser,
    stopping: Stopping,
    *,
    streamer: Streamer | None = None,
    on_step: Callable[[SpeculationStats], object] | None = None,
    schedule: DraftLength | None = None,
) -> tuple[npt.NDArray[np.int64], SpeculationStats]:
    """Greedy decoding of one row with drafts verified in chunks; plain greedy's tokens.

    ``schedule``: how many of each proposal to verify (:class:`DraftLength`, from the
    measured cost of each chunk size and the acceptance so far); ``None``: all of them.
    Plain greedy without logits processors takes each position's largest logit at once,
    and without stop strings a row ends on its EOS ids alone (no array built a token).

    Returns:
        ``start`` followed by the new tokens (1, length), and the statistics.
    """
    sequence = [int(t) for t in start[0]]
    prompt, budget = len(sequence), stopping.max_new_tokens
    stats = SpeculationStats()
    direct = chooser.passes_through()  # the largest logit is the token
    ends = frozenset(stopping.eos_token_id) if stopping.stop is None else None
    # Right after a run the interpreter's caches are cold (the weights went through them),
    # so a step looks up its callables once and makes few calls.
    clock, propose, run, cut = time.perf_counter, drafter.propose, runner.run, runner.cut
    length = schedule.length if schedule is not None else None
    done, timed = False, False  # timed: the prompt's step is not recorded
    while not done:
        began = clock()
        left = budget - (len(sequence) - prompt)
        offered = propose(sequence, left - 1) if left > 1 else []
        drafts = offered[: length(len(offered))] if length is not None and offered else offered
        logits = run(sequence[runner.cached :] + drafts, len(drafts) + 1)
        stats.steps += 1
        if direct and ends is not None:  # plain greedy, EOS ids only: the step at once
            new = _greedy_tokens(logits, drafts, left, ends)
            sequence += new
            if streamer is not None:
                for token in new:
                    streamer(np.array([token], np.int64))
            done = new[-1] in ends or len(new) == left
            kept = len(new) - 1
        else:
            kept, done = _processed_tokens(
                logits, drafts, sequence, prompt, chooser, stopping, streamer
            )
        stats.proposed += len(drafts)
        stats.accepted += kept
        drafter.accepted(len(drafts), kept)
        cut(len(sequence) - 1)  # the last token is not in the cache yet
        if schedule is not None:
            if timed:
                # the step's kept drafts equal the proposal's first; its own token is
                # compared with the next draft offered (verified or not)
                matched = kept + (kept < len(offered) and sequence[-1] == offered[kept])
                missed = matched < min(kept + 1, len(offered))
                schedule.record(len(drafts) + 1, clock() - began, matched, missed)
            timed = True
        if on_step is not None:
            on_step(stats)
    return np.array([sequence], np.int64), stats


def _processed_tokens(
    logits: npt.NDArray[np.float32],
    drafts: list[int],
    sequence: list[int],
    prompt: int,
    chooser: TokenChooser,
    stopping: Stopping,
    streamer: Streamer | None,
) -> tuple[int, bool]:
    """A step's tokens, one at a time through the logits processors, appended to ``sequence``.

    Returns how many drafts were kept and whether the row is done.
    """
    budget = stopping.max_new_tokens
    rng = np.random.default_rng(0)  # unused: greedy
    kept, done = 0, False
    for i in range(len(drafts) + 1):
        scores = chooser.process(
            logits[i][None].copy(),
            np.array([sequence], np.int64),
            step=len(sequence) - prompt,
            max_length=prompt + budget,
        )
        token = int(chooser.choose(scores, rng)[0])
        sequence.append(token)
        if streamer is not None:
            streamer(np.array([token], np.int64))
        done = bool(stopping.hits(np.array([sequence], np.int64))[0])
        done = done or len(sequence) - prompt >= budget
        if done or i == len(drafts) or token != drafts[i]:
            break
        kept += 1
    return kept, done
