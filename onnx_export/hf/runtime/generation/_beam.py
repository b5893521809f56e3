"""Beam search with an exported decoder, numpy + onnxruntime only.

It follows ``transformers``' vectorised beam search step by step (the same candidate
count, length penalty, early-stopping heuristic and ``-1e9`` masks, in float32), so its
beams and the returned sequences are the ones ``generate(num_beams=...)`` returns. The
cache is reordered between steps by the beams each new beam came from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._session import StepSession
from onnx_export.hf.runtime.generation._generate import Feed, NextFeed, Stopping
from onnx_export.hf.runtime.generation._logits import TokenChooser, log_softmax

__all__ = ["BeamSettings", "beam_search"]

_MASK = np.float32(-1.0e9)
Ids = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Bools = npt.NDArray[np.bool_]


@dataclasses.dataclass(frozen=True)
class BeamSettings:
    """The beam search's settings, as ``transformers``' generation config names them."""

    num_beams: int
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    do_sample: bool = False

    def __post_init__(self) -> None:
        if self.early_stopping not in (True, False, "never"):
            raise GenerationError(
                f"early_stopping must be True, False or 'never', got {self.early_stopping!r}."
            )
        if not 1 <= self.num_return_sequences <= self.num_beams:
            raise GenerationError(
                f"num_return_sequences ({self.num_return_sequences}) must be between 1 and "
                f"num_beams ({self.num_beams})."
            )


def _gather(values: npt.NDArray[Any], index: Ids) -> npt.NDArray[Any]:
    """``values`` (batch, beams, ...) taken along the beams axis at ``index`` (batch, k)."""
    while index.ndim < values.ndim:
        index = index[..., None]
    return np.take_along_axis(values, index, axis=1)


def _top(values: Floats, k: int) -> Ids:
    """Indices of the ``k`` largest values of each row, largest first (ties: lower first)."""
    return np.argsort(-values, axis=-1, kind="stable")[:, :k]


@dataclasses.dataclass
class _Beams:
    """The running and finished beams, (batch, beams, ...) each."""

    running: Ids
    running_scores: Floats
    running_origin: npt.NDArray[np.int32]
    sequences: Ids
    scores: Floats
    origin: npt.NDArray[np.int32]
    finished: Bools
    improvable: Bools


def _start(start: Ids, beams: int, max_length: int, fill: int) -> _Beams:
    batch, length = start.shape[0] // beams, start.shape[1]
    running = np.full((batch, beams, max_length), fill, np.int64)
    running[:, :, :length] = start.reshape(batch, beams, length)
    scores = np.zeros((batch, beams), np.float32)
    scores[:, 1:] = _MASK
    origin = np.full((batch, beams, max_length - length), -1, np.int32)
    return _Beams(
        running=running,
        running_scores=scores,
        running_origin=origin,
        sequences=running.copy(),
        scores=np.full((batch, beams), _MASK, np.float32),
        origin=origin.copy(),
        finished=np.zeros((batch, beams), bool),
        improvable=np.ones((batch, 1), bool),
    )


def _candidates(
    state: _Beams,
    log_probs: Floats,
    settings: BeamSettings,
    keep: int,
    cur: int,
    prompt: int,
    rng: np.random.Generator,
) -> tuple[Floats, Ids, npt.NDArray[np.int32]]:
    """The ``keep`` best continuations (or sampled ones) of every batch row."""
    batch, beams = state.running_scores.shape
    vocab = log_probs.shape[-1]
    total = (log_probs.reshape(batch, beams, vocab) + state.running_scores[:, :, None]).reshape(
        batch, beams * vocab
    )
    if settings.do_sample:  # sampling without replacement: the Gumbel top-k trick
        noisy = total.astype(np.float64) + rng.gumbel(size=total.shape)
        index = _top(noisy.astype(np.float32), keep)
        picked = np.take_along_axis(total, index, axis=1)
        order = np.argsort(-picked, axis=-1, kind="stable")
        index = np.take_along_axis(index, order, axis=1)
    else:
        index = _top(total, keep)
    top_scores = np.take_along_axis(total, index, axis=1)
    beam_of, token = index // vocab, index % vocab
    seqs = _gather(state.running, beam_of).copy()
    seqs[:, :, cur] = token
    origin = _gather(state.running_origin, beam_of).copy()
    origin[:, :, cur - prompt] = beam_of + np.arange(batch)[:, None] * beams
    return top_scores, seqs, origin


def _finish(
    state: _Beams,
    top: tuple[Floats, Ids, npt.NDArray[np.int32]],
    hits: Bools,
    settings: BeamSettings,
    cur: int,
    prompt: int,
) -> None:
    """Move the candidates that just ended into the finished beams (transformers' rule)."""
    top_scores, seqs, origin = top
    beams = settings.num_beams
    first = np.zeros(hits.shape[1], bool)
    first[:beams] = True
    just = hits & first[None, :]
    scores = top_scores / np.float32((cur + 1 - prompt) ** settings.length_penalty)
    full = state.finished.all(axis=-1, keepdims=True) & (settings.early_stopping is True)
    scores = scores + full.astype(np.float32) * _MASK
    scores = scores + (~state.improvable).astype(np.float32) * _MASK
    scores = (scores + (~just).astype(np.float32) * _MASK).astype(np.float32)
    merged_scores = np.concatenate([state.scores, scores], axis=1)
    best = _top(merged_scores, beams)
    state.sequences = _gather(np.concatenate([state.sequences, seqs], axis=1), best)
    state.scores = _gather(merged_scores, best)
    state.origin = _gather(np.concatenate([state.origin, origin], axis=1), best)
    state.finished = _gather(np.concatenate([state.finished, just], axis=1), best)


def _still_improvable(
    state: _Beams, settings: BeamSettings, cur: int, max_length: int, prompt: int
) -> Bools:
    if settings.early_stopping == "never" and settings.length_penalty > 0.0:
        best_length = max_length - prompt
    else:
        best_length = cur - prompt
    best_running = state.running_scores[:, :1] / np.float32(best_length**settings.length_penalty)
    worst = np.where(state.finished, state.scores.min(axis=1, keepdims=True), _MASK)
    return state.improvable & (best_running > worst).any(axis=-1, keepdims=True)


def beam_search(
    session: StepSession,
    first: Feed,
    next_feed: NextFeed,
    start: Ids,
    chooser: TokenChooser,
    stopping: Stopping,
    settings: BeamSettings,
    rng: np.random.Generator,
    padding: npt.NDArray[np.int64] | None = None,
) -> Ids:
    """Beam search from ``start`` (batch * num_beams, length: each prompt repeated).

    Returns (batch * num_return_sequences, length + new tokens): each prompt's best
    sequences, best first; shorter ones are filled with the pad (or EOS) token.
    """
    beams, prompt = settings.num_beams, start.shape[1]
    batch = start.shape[0] // beams
    max_length = prompt + stopping.max_new_tokens
    eos = stopping.eos_token_id
    keep = max(2, 1 + len(eos)) * beams
    fill = (stopping.pad_token_id or eos[0]) if eos else -1
    state = _start(start, beams, max_length, fill)
    past = session.empty_past(batch * beams)
    feed, flat, cur = first, start, prompt
    while True:
        results = session.run({**feed, **past})
        log_probs = log_softmax(session.last_logits(results))
        log_probs = chooser.process(
            log_probs, flat, step=cur - prompt, max_length=max_length, padding=padding
        )
        top = _candidates(state, log_probs, settings, keep, cur, prompt, rng)
        ended = top[1][:, :, : cur + 1].reshape(batch * keep, cur + 1)
        hits = (stopping.hits(ended) | (cur + 1 >= max_length)).reshape(batch, keep)
        running_scores = (top[0] + hits.astype(np.float32) * _MASK).astype(np.float32)
        nxt = _top(running_scores, beams)
        state.running = _gather(top[1], nxt)
        state.running_scores = _gather(running_scores, nxt)
        state.running_origin = _gather(top[2], nxt)
        _finish(state, top, hits, settings, cur, prompt)
        rows = state.running_origin[:, :, cur - prompt].reshape(-1).astype(np.int64)
        cur += 1
        state.improvable = _still_improvable(state, settings, cur, max_length, prompt)
        open_beam = not (state.finished.all() and settings.early_stopping is True)
        if not (state.improvable.any() and open_beam and not hits.all()):
            break
        past = session.reorder(session.next_past(results), rows)
        flat = state.running[:, :, :cur].reshape(batch * beams, cur)
        feed = next_feed(flat[:, -1])
    returned = settings.num_return_sequences
    sequences = state.sequences[:, :returned].reshape(batch * returned, max_length)
    origin = state.origin[:, :returned].reshape(batch * returned, -1)
    generated = int((origin != -1).sum(axis=1).max())
    return sequences[:, : prompt + generated]
