"""Speculative decoding: draft k tokens cheaply, verify them in one step of the model.

Under transformers' names: ``prompt_lookup_num_tokens=k`` drafts the k tokens that
followed the last n-gram's earliest earlier occurrence (n from ``max_matching_ngram_size``,
2 by default, down to 1: transformers' ``PromptLookupCandidateGenerator``);
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
        self._keeps = keeps_logits(session)
        self._shared: SharedCache | None = None
        self._capacity = capacity or _FIRST_CAPACITY
        self._past: dict[str, Value] = {} if session.shares_buffer else session.empty_past(1)
        self.cached = 0

    def run(self, tokens: list[int], wanted: int | None = None) -> npt.NDArray[np.float32]:
        """The logits after each of the last ``wanted`` (all) ``tokens``; the cache holds them."""
        wanted = len(tokens) if wanted is None else wanted
        total = self.cached + len(tokens)
        feed: dict[str, Any] = {
            "input_ids": np.array([tokens], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
        }
        if self._uses_positions:
            feed["position_ids"] = np.arange(self.cached, total, dtype=np.int64)[None]
        if self._keeps and wanted > 1:
            feed[LOGITS_TO_KEEP] = np.array([wanted], np.int64)
        if self._session.shares_buffer:
            logits = self._shared_for(total).run_new(feed, wanted if self._keeps else 1)
        else:
            results = self._session.run({**feed, **self._past})
            self._past = self._session.next_past(results)
            logits = host_float32(results["logits"])[0]
        self.cached = total
        if logits.shape[0] < wanted:
            raise GenerationError(
                f"The decoder gave {logits.shape[0]} positions' logits, {wanted} were needed: "
                "export the folder again with this version (its fused decoder gives the "
                "logits of every draft) or with the default target."
            )
        return np.ascontiguousarray(logits[logits.shape[0] - wanted :], dtype=np.float32)

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

    Example:
        >>> PromptLookup(num_tokens=3).propose([5, 6, 7, 8, 5, 6], 3)
        [7, 8, 5]
    """

    num_tokens: int
    max_ngram: int = 2

    def propose(self, sequence: list[int], count: int) -> list[int]:
        """As transformers' ``PromptLookupCandidateGenerator``: the earliest match wins."""
        ids = np.asarray(sequence, np.int64)
        length, count = len(ids), min(count, self.num_tokens)
        for size in range(min(self.max_ngram, length - 1), 0, -1):
            # where an earlier window equals the last ``size`` tokens (not the last itself)
            same = ids[: length - size] == ids[length - size]
            for j in range(1, size):
                same &= ids[j : length - size + j] == ids[length - size + j]
            found = np.flatnonzero(same)
            if found.size:
                start = int(found[0]) + size
                return [int(t) for t in ids[start : min(start + count, length)]]
        return []

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


def speculative_decode(
    runner: ChunkRunner,
    drafter: Drafter,
    start: npt.NDArray[np.int64],
    chooser: TokenChooser,
    stopping: Stopping,
    *,
    streamer: Streamer | None = None,
    on_step: Callable[[SpeculationStats], object] | None = None,
) -> tuple[npt.NDArray[np.int64], SpeculationStats]:
    """Greedy decoding of one row with drafts verified in chunks; plain greedy's tokens.

    Returns:
        ``start`` followed by the new tokens (1, length), and the statistics.
    """
    sequence = [int(t) for t in start[0]]
    prompt, budget = len(sequence), stopping.max_new_tokens
    max_length = prompt + budget
    rng = np.random.default_rng(0)  # unused: greedy
    stats = SpeculationStats()
    done = False
    while not done:
        made = len(sequence) - prompt
        drafts = drafter.propose(sequence, budget - made - 1) if budget - made > 1 else []
        logits = runner.run(sequence[runner.cached :] + drafts, len(drafts) + 1)
        stats.steps += 1
        kept = 0
        for i in range(len(drafts) + 1):
            scores = chooser.process(
                logits[i][None].copy(),
                np.array([sequence], np.int64),
                step=len(sequence) - prompt,
                max_length=max_length,
            )
            token = int(chooser.choose(scores, rng)[0])
            sequence.append(token)
            if streamer is not None:
                streamer(np.array([token], np.int64))
            hit = bool(stopping.hits(np.array([sequence], np.int64))[0])
            done = hit or len(sequence) - prompt >= budget
            if done or i == len(drafts) or token != drafts[i]:
                break
            kept += 1
        stats.proposed += len(drafts)
        stats.accepted += kept
        drafter.accepted(len(drafts), kept)
        runner.cut(len(sequence) - 1)  # the last token is not in the cache yet
        if on_step is not None:
            on_step(stats)
    return np.array([sequence], np.int64), stats
