"""Choosing the next token from logits, with numpy only: greedy or sampled.

The processors follow ``transformers``' order (token suppression and forced tokens,
then temperature, top-k, top-p), so greedy decoding picks the same tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError

__all__ = ["TokenChooser"]

_NEG_INF = np.float32(-np.inf)


@dataclasses.dataclass(frozen=True)
class TokenChooser:
    """How the next token is chosen: the logits processors and the sampling settings.

    Attributes:
        do_sample: Sample from the distribution (else greedy: the largest logit).
        temperature: Logits are divided by it before sampling.
        top_k: Keep only the ``top_k`` largest logits before sampling.
        top_p: Keep the smallest set of tokens whose probability reaches ``top_p``.
        suppress_tokens: Tokens never chosen.
        begin_suppress_tokens: Tokens not chosen at the first new step.
        forced_bos_token_id: Token forced at the first step of an encoder-decoder
            (when the sequence holds only the start token).
        forced_eos_token_id: Token forced at the last step (``max_length - 1``).
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    forced_bos_token_id: int | None = None
    forced_eos_token_id: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.do_sample and not self.temperature > 0:
            raise GenerationError(f"temperature must be > 0, got {self.temperature}.")
        if self.top_k is not None and self.top_k < 1:
            raise GenerationError(f"top_k must be at least 1, got {self.top_k}.")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p must be in (0, 1], got {self.top_p}.")

    def process(
        self, scores: npt.NDArray[np.float32], *, step: int, length: int, max_length: int
    ) -> npt.NDArray[np.float32]:
        """Apply suppression and forced tokens to ``scores`` (batch, vocab), in place.

        ``step`` counts new tokens so far, ``length`` is the sequence's current length.
        """
        if self.suppress_tokens:
            scores[:, _in_vocab(self.suppress_tokens, scores)] = _NEG_INF
        if step == 0 and self.begin_suppress_tokens:
            scores[:, _in_vocab(self.begin_suppress_tokens, scores)] = _NEG_INF
        if self.forced_bos_token_id is not None and length == 1:
            _force(scores, (self.forced_bos_token_id,))
        if self.forced_eos_token_id and length == max_length - 1:
            _force(scores, self.forced_eos_token_id)
        return scores

    def choose(
        self, scores: npt.NDArray[np.float32], rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The next token of each row of processed ``scores`` (batch, vocab)."""
        if not self.do_sample:
            greedy: npt.NDArray[np.int64] = scores.argmax(axis=-1).astype(np.int64)
            return greedy
        scores = scores / np.float32(self.temperature)
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = np.partition(scores, -self.top_k, axis=-1)[:, -self.top_k, None]
            scores = np.where(scores < kth, _NEG_INF, scores)
        probs = _softmax(scores)
        if self.top_p is not None and self.top_p < 1.0:
            probs = _nucleus(probs, self.top_p)
        cumulative = np.cumsum(probs.astype(np.float64), axis=-1)
        draws = rng.random(probs.shape[0]) * cumulative[:, -1]
        chosen = (cumulative < draws[:, None]).sum(axis=-1)
        sampled: npt.NDArray[np.int64] = np.minimum(chosen, probs.shape[-1] - 1).astype(np.int64)
        return sampled


def _in_vocab(tokens: Sequence[int], scores: npt.NDArray[np.float32]) -> list[int]:
    return [t for t in tokens if 0 <= t < scores.shape[-1]]


def _force(scores: npt.NDArray[np.float32], tokens: Sequence[int]) -> None:
    keep = _in_vocab(tokens, scores)
    scores[:] = _NEG_INF
    scores[:, keep] = 0.0


def _softmax(scores: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    shifted = scores - scores.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def _nucleus(probs: npt.NDArray[np.float32], top_p: float) -> npt.NDArray[np.float32]:
    """Zero the tail of each row outside the smallest set reaching ``top_p`` (keep >= 1)."""
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    before = np.cumsum(sorted_probs, axis=-1) - sorted_probs
    sorted_probs = np.where(before < top_p, sorted_probs, 0.0)
    out = np.zeros_like(probs)
    np.put_along_axis(out, order, sorted_probs, axis=-1)
    return out / out.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]
