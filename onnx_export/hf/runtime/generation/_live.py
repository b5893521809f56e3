"""Continuous decoding: one token sequence whose key/value cache lives between calls.

Tokens appended are run through the model only when logits are needed, so a chat loop
(append the user's turn, generate the answer, append the next turn...) runs each token
once; ``rewind`` cuts the cache back instead of recomputing the prefix.

A fused decoder (``session.shares_buffer``) keeps the cache in a :class:`SharedCache`
that GQA updates in place: it doubles when full (one copy), and a rewind only lowers the
filled length (GQA reads the attention mask's length of it, no further).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._session import StepSession
from onnx_export.hf.runtime.generation._generate import Stopping, Streamer, as_rng
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._shared_cache import SharedCache

__all__ = ["LiveSequence"]

#: Builds the chooser and stopping rule of one generate() call on the live tokens.
PlanFor = Callable[..., tuple[TokenChooser, Stopping]]

#: The first shared cache's positions (it doubles when full, up to the model's limit).
_FIRST_CAPACITY = 64


class LiveSequence:
    """A sequence of tokens (batch 1) with its cache kept in ONNX Runtime values.

    Made by :meth:`OrtModelForCausalLM.live`. ``append`` adds tokens, ``generate``
    continues from the cache (the settings of :meth:`OrtModelForCausalLM.generate`, not
    beam search), ``rewind`` drops the last tokens and cuts the cache to match.

    Example:
        >>> live = model.live([1, 2, 3])  # doctest: +SKIP
        >>> live.generate(max_new_tokens=4)  # doctest: +SKIP
        array([7, 7, 9, 4])
        >>> live.rewind(2); live.append([5]); live.tokens  # doctest: +SKIP
        array([1, 2, 3, 7, 7, 5])
    """

    def __init__(
        self,
        session: StepSession,
        plan_for: PlanFor,
        *,
        uses_positions: bool,
        limit: int | None,
        vocab: int | None,
    ) -> None:
        self._session = session
        self._plan_for = plan_for
        self._uses_positions = uses_positions
        self._limit = limit
        self._vocab = vocab
        self._tokens: list[int] = []
        self._cached = 0
        self._past: dict[str, ort.OrtValue] = {} if session.shares_buffer else session.empty_past(1)
        self._shared: SharedCache | None = None
        self._logits: npt.NDArray[np.float32] | None = None

    @property
    def tokens(self) -> npt.NDArray[np.int64]:
        """Every token so far, (length,) int64."""
        return np.array(self._tokens, np.int64)

    def append(self, ids: Sequence[int] | npt.NDArray[np.integer[Any]]) -> None:
        """Add ``ids`` (1-D) to the sequence; they run when logits are next needed."""
        values = np.asarray(ids).reshape(-1)
        if values.size and not np.issubdtype(values.dtype, np.integer):
            raise GenerationError(f"append() takes token ids, got dtype {values.dtype}.")
        bad = [int(v) for v in values if v < 0 or (self._vocab is not None and v >= self._vocab)]
        if bad:
            raise GenerationError(
                f"append() got token ids {bad[:8]} outside the vocabulary [0, {self._vocab})."
            )
        if self._limit is not None and len(self._tokens) + values.size > self._limit:
            raise GenerationError(
                f"The sequence would be {len(self._tokens) + values.size} tokens, over the "
                f"model's {self._limit} positions: rewind() or start a new live()."
            )
        self._tokens.extend(int(v) for v in values)

    def rewind(self, count: int) -> None:
        """Drop the last ``count`` tokens; the cache is cut, not recomputed."""
        if not 0 <= count <= len(self._tokens):
            raise GenerationError(f"rewind() takes 0 to {len(self._tokens)} tokens, got {count}.")
        del self._tokens[len(self._tokens) - count :]
        keep = max(len(self._tokens) - 1, 0)  # the last token reruns, for its logits
        if keep < self._cached and self._session.shares_buffer:
            self._cached = keep  # the shared cache is read up to the mask's length only
        elif keep < self._cached:
            self._past = (
                self._session.slice_past(self._past, keep) if keep else self._session.empty_past(1)
            )
            self._cached = keep

    def logits(self) -> npt.NDArray[np.float32]:
        """The next token's logits (vocab,), running the tokens not yet in the cache."""
        pending = self._tokens[self._cached :]
        if not pending:
            if self._logits is None:
                raise GenerationError("The sequence is empty: append() tokens first.")
            return self._logits
        total = len(self._tokens)
        feed: dict[str, Any] = {
            "input_ids": np.array([pending], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
        }
        if self._uses_positions:
            feed["position_ids"] = np.arange(self._cached, total, dtype=np.int64)[None]
        if self._session.shares_buffer:
            cache = self._shared_for(total)
            self._logits = cache.last_logits(cache.run(feed))[0].copy()
        else:
            results = self._session.run({**feed, **self._past})
            self._past = self._session.next_past(results)
            self._logits = self._session.last_logits(results)[0]
        self._cached = total
        return self._logits

    def _shared_for(self, total: int) -> SharedCache:
        """The shared cache, grown (doubled, within the limit) to hold ``total`` positions."""
        cache = self._shared
        if cache is None or cache.capacity < total:
            capacity = max(total, 2 * cache.capacity if cache else _FIRST_CAPACITY)
            if self._limit is not None:
                capacity = max(min(capacity, self._limit), total)
            if cache is None:
                cache = SharedCache(self._session, 1, capacity)
            else:
                cache = cache.grown(capacity, self._cached)
            self._shared = cache
        return cache

    def generate(
        self,
        *,
        max_new_tokens: int,
        eos_token_id: int | Sequence[int] | None = None,
        seed: int | np.random.Generator | None = None,
        streamer: Streamer | None = None,
        **settings: Any,
    ) -> npt.NDArray[np.int64]:
        """Continue the sequence by up to ``max_new_tokens``; returns the new tokens.

        Example:
            >>> live.generate(max_new_tokens=2, repetition_penalty=1.2)  # doctest: +SKIP
            array([7, 9])
        """
        if (settings.get("num_beams") or 1) > 1:
            raise GenerationError(
                "A live sequence does greedy or sampled decoding: drop num_beams."
            )
        if self._limit is not None and len(self._tokens) + max_new_tokens > self._limit:
            raise GenerationError(
                f"{len(self._tokens)} tokens plus max_new_tokens={max_new_tokens} pass the "
                f"model's {self._limit} positions: generate less or rewind()."
            )
        start = len(self._tokens)
        chooser, stopping = self._plan_for(start, max_new_tokens, eos_token_id, settings)
        rng = as_rng(seed)
        for step in range(stopping.max_new_tokens):
            sequence = self.tokens[None]
            scores = chooser.process(
                self.logits()[None].copy(), sequence, step=step, max_length=start + max_new_tokens
            )
            token = int(chooser.choose(scores, rng)[0])
            self._tokens.append(token)
            if streamer is not None:
                streamer(np.array([token], np.int64))
            if stopping.hits(self.tokens[None])[0]:
                break
        return self.tokens[start:]
