"""Choosing the next token from logits, with numpy only: the logits processors of generate().

The processors follow ``transformers``' order (repetition penalty, no-repeat n-grams, bad
words, minimum lengths, forced tokens, token suppression; then, when sampling, temperature,
top-k and top-p), each computed as ``transformers`` computes it, so greedy decoding and beam
search pick the same tokens and sampling draws from the same distribution.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError

__all__ = ["TokenChooser", "log_softmax"]

_NEG_INF = np.float32(-np.inf)
Scores = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]


@dataclasses.dataclass(frozen=True)
class TokenChooser:
    """How the next token is chosen: the logits processors and the sampling settings.

    Attributes:
        do_sample: Sample from the distribution (else greedy: the largest logit).
        temperature: Logits are divided by it before sampling.
        top_k: Keep only the ``top_k`` largest logits before sampling (``None``: all).
        top_p: Keep the smallest set of tokens whose probability reaches ``top_p``.
        suppress_tokens: Tokens never chosen.
        begin_suppress_tokens: Tokens not chosen at the first new step.
        forced_bos_token_id: Token forced at the first step of an encoder-decoder
            (when the sequence holds only the start token).
        forced_eos_token_id: Token forced at the last step (``max_length - 1``).
        repetition_penalty: Divides positive (multiplies negative) scores of tokens
            already in the sequence (left padding excluded); 1.0 is off.
        no_repeat_ngram_size: An n-gram of this size never occurs twice; 0 is off.
        bad_words_ids: Token sequences never produced (their last token is banned after
            the rest).
        min_length: EOS is banned while the sequence (prompt included) is shorter.
        min_new_tokens: EOS is banned while fewer new tokens were made.
        eos_token_id: The EOS tokens the minimum lengths and bad words refer to.
        prompt_length: The prompt's length (for ``min_new_tokens``).
        min_tokens_to_keep: top-k and top-p keep at least this many tokens.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    forced_bos_token_id: int | None = None
    forced_eos_token_id: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    min_length: int = 0
    min_new_tokens: int = 0
    eos_token_id: tuple[int, ...] = ()
    prompt_length: int = 0
    min_tokens_to_keep: int = 1

    def __post_init__(self) -> None:
        if self.do_sample and not self.temperature > 0:
            raise GenerationError(f"temperature must be > 0, got {self.temperature}.")
        if self.top_k is not None and self.top_k < 1:
            raise GenerationError(f"top_k must be at least 1, got {self.top_k}.")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not self.repetition_penalty > 0:
            raise GenerationError(
                f"repetition_penalty must be > 0 (1.0 is off), got {self.repetition_penalty}."
            )
        if self.no_repeat_ngram_size < 0 or self.min_length < 0 or self.min_new_tokens < 0:
            raise GenerationError(
                "no_repeat_ngram_size, min_length and min_new_tokens must be >= 0, got "
                f"{self.no_repeat_ngram_size}, {self.min_length}, {self.min_new_tokens}."
            )
        if any(not words or min(words) < 0 for words in self.bad_words_ids):
            raise GenerationError(
                "bad_words_ids must be a list of non-empty lists of token ids >= 0, got "
                f"{[list(w) for w in self.bad_words_ids]}."
            )

    def passes_through(self) -> bool:
        """Greedy with no processor: :meth:`process` returns every step's scores as given.

        The decoding loop then takes the largest logit directly (the same token).

        Example:
            >>> TokenChooser().passes_through()
            True
            >>> TokenChooser(repetition_penalty=1.2).passes_through()
            False
        """
        lengths = self.eos_token_id and (self.min_length or self.min_new_tokens)
        processors = (
            self.repetition_penalty != 1.0,
            self.no_repeat_ngram_size,
            self.bad_words_ids,
            lengths,
            self.forced_bos_token_id is not None,
            self.forced_eos_token_id,
            self.suppress_tokens,
            self.begin_suppress_tokens,
        )
        return not self.do_sample and not any(processors)

    def process(
        self,
        scores: Scores,
        sequences: Ids,
        *,
        step: int,
        max_length: int,
        padding: npt.NDArray[np.int64] | None = None,
    ) -> Scores:
        """The processed ``scores`` (batch, vocab) of the rows ``sequences`` (batch, length).

        ``step`` counts new tokens so far; ``padding`` is each row's left padding (excluded
        from the repetition penalty, as in ``transformers``). Sampling warpers are applied
        when ``do_sample``.
        """
        length = sequences.shape[1]
        if self.repetition_penalty != 1.0:
            scores = _repetition(scores, sequences, self.repetition_penalty, padding)
        if self.no_repeat_ngram_size > 0:
            scores = _no_repeat_ngram(scores, sequences, self.no_repeat_ngram_size)
        if self.bad_words_ids:
            scores = _bad_words(scores, sequences, self.bad_words_ids, self.eos_token_id)
        too_short = length < self.min_length or length - self.prompt_length < self.min_new_tokens
        if self.eos_token_id and too_short:
            scores[:, _in_vocab(self.eos_token_id, scores)] = _NEG_INF
        if self.forced_bos_token_id is not None and length == 1:
            _force(scores, (self.forced_bos_token_id,))
        if self.forced_eos_token_id and length == max_length - 1:
            _force(scores, self.forced_eos_token_id)
        if self.suppress_tokens:
            scores[:, _in_vocab(self.suppress_tokens, scores)] = _NEG_INF
        if step == 0 and self.begin_suppress_tokens:
            scores[:, _in_vocab(self.begin_suppress_tokens, scores)] = _NEG_INF
        return self.warp(scores) if self.do_sample else scores

    def warp(self, scores: Scores) -> Scores:
        """Temperature, top-k and top-p, as ``transformers``' sampling warpers."""
        if self.temperature != 1.0:
            scores = (scores / np.float32(self.temperature)).astype(np.float32)
        if self.top_k is not None:
            top_k = min(max(self.top_k, self.min_tokens_to_keep), scores.shape[-1])
            kth = np.partition(scores, -top_k, axis=-1)[:, -top_k, None]
            scores = np.where(scores < kth, _NEG_INF, scores)
        if self.top_p is not None and self.top_p < 1.0:
            scores = _top_p(scores, self.top_p, self.min_tokens_to_keep)
        return scores

    def choose(self, scores: Scores, rng: np.random.Generator) -> Ids:
        """The next token of each row of processed ``scores`` (batch, vocab)."""
        if not self.do_sample:
            greedy: Ids = scores.argmax(axis=-1).astype(np.int64)
            return greedy
        probs = np.exp(scores.astype(np.float64) - log_softmax_norm(scores.astype(np.float64)))
        cumulative = np.cumsum(probs, axis=-1)
        draws = rng.random(probs.shape[0]) * cumulative[:, -1]
        chosen = (cumulative <= draws[:, None]).sum(axis=-1)
        sampled: Ids = np.minimum(chosen, probs.shape[-1] - 1).astype(np.int64)
        return sampled


def log_softmax_norm(scores: npt.NDArray[np.floating]) -> npt.NDArray[np.floating]:
    """The log of each row's softmax normaliser (batch, 1), stable for -inf entries."""
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    return top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True))  # type: ignore[no-any-return]


def log_softmax(logits: Scores) -> Scores:
    """``log_softmax`` over the last axis, in float32 as transformers' beam search takes it."""
    return (logits - log_softmax_norm(logits)).astype(np.float32)


def _in_vocab(tokens: Sequence[int], scores: Scores) -> list[int]:
    return [t for t in tokens if 0 <= t < scores.shape[-1]]


def _force(scores: Scores, tokens: Sequence[int]) -> None:
    keep = _in_vocab(tokens, scores)
    scores[:] = _NEG_INF
    scores[:, keep] = 0.0


def _repetition(
    scores: Scores, sequences: Ids, penalty: float, padding: npt.NDArray[np.int64] | None
) -> Scores:
    vocab = scores.shape[-1]
    seen = np.minimum(sequences, vocab)
    if padding is not None:
        positions = np.arange(sequences.shape[1])[None, :]
        seen = np.where(positions < padding[:, None], vocab, seen)
    padded = np.concatenate([scores, np.zeros((scores.shape[0], 1), scores.dtype)], axis=1)
    picked = np.take_along_axis(padded, seen, axis=1)
    picked = np.where(picked < 0, picked * np.float32(penalty), picked / np.float32(penalty))
    np.put_along_axis(padded, seen, picked.astype(scores.dtype), axis=1)
    return padded[:, :vocab]


def _no_repeat_ngram(scores: Scores, sequences: Ids, size: int) -> Scores:
    length = sequences.shape[1]
    if length < size:
        return scores
    prefix = sequences[:, length + 1 - size :]
    windows = np.lib.stride_tricks.sliding_window_view(sequences, size, axis=1)
    matches = (windows[..., :-1] == prefix[:, None, :]).all(axis=-1)
    rows, where = np.nonzero(matches)
    banned = windows[rows, where, -1]
    keep = banned < scores.shape[-1]
    scores[rows[keep], banned[keep]] = _NEG_INF
    return scores


def _bad_words(
    scores: Scores, sequences: Ids, words: tuple[tuple[int, ...], ...], eos: tuple[int, ...]
) -> Scores:
    vocab = scores.shape[-1]
    outside = sorted({t for w in words for t in w if t >= vocab})
    if outside:
        raise GenerationError(
            f"bad_words_ids holds token ids {outside}, past the model's vocabulary of {vocab}."
        )
    for word in words:
        if len(word) == 1 and word[0] in eos:
            continue  # transformers keeps EOS allowed even when listed alone
        prefix = word[:-1]
        if len(prefix) > sequences.shape[1]:
            continue
        rows = (sequences[:, sequences.shape[1] - len(prefix) :] == prefix).all(axis=-1)
        scores[rows, word[-1]] = _NEG_INF
    return scores


def _top_p(scores: Scores, top_p: float, min_keep: int) -> Scores:
    """Transformers' TopPLogitsWarper: drop the ascending tail whose mass is <= 1 - top_p."""
    order = np.argsort(scores, axis=-1, kind="stable")
    ordered = np.take_along_axis(scores, order, axis=-1).astype(np.float32)
    probs = np.exp(ordered - log_softmax_norm(ordered))
    remove = np.cumsum(probs, axis=-1, dtype=np.float32) <= np.float32(1 - top_p)
    remove[:, remove.shape[-1] - min_keep :] = False
    drop = np.zeros_like(remove)
    np.put_along_axis(drop, order, remove, axis=-1)
    return np.where(drop, _NEG_INF, scores).astype(np.float32)
