"""The decoding loop shared by the causal and the encoder-decoder runtimes."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._pretrained import token_ids
from onnx_export.hf.runtime._session import DecodeSession
from onnx_export.hf.runtime.generation._logits import TokenChooser

__all__ = ["Stopping", "decode", "decode_steps", "as_ids", "as_mask", "as_rng", "check_vocab"]

Feed = dict[str, "npt.NDArray[Any] | ort.OrtValue"]
#: Builds the next step's inputs (without the past) from the tokens just chosen.
NextFeed = Callable[[npt.NDArray[np.int64]], Feed]
#: Which rows (batch, length) just completed a stop string: a bool per row.
StopCheck = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]]
#: Called with each step's new tokens (batch,), as they are chosen.
Streamer = Callable[[npt.NDArray[np.int64]], object]


@dataclasses.dataclass(frozen=True)
class Stopping:
    """When to stop and what to write after a row ends."""

    max_new_tokens: int
    eos_token_id: tuple[int, ...]
    pad_token_id: int | None
    stop: StopCheck | None = None

    @classmethod
    def resolve(
        cls, max_new_tokens: int, eos: Any, pad: int | None, stop: StopCheck | None = None
    ) -> Stopping:
        """Like transformers: ``pad`` defaults to the first EOS token."""
        max_new_tokens = check_max_new_tokens(max_new_tokens)
        eos_ids = token_ids(eos)
        if pad is None and eos_ids:
            pad = eos_ids[0]
        return cls(max_new_tokens, eos_ids, pad, stop)

    def hits(self, sequences: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Rows whose last token ends them: an EOS token or a completed stop string."""
        done = None
        if self.eos_token_id:  # == per EOS id: np.isin costs ~50 us a step in its setup
            last = sequences[:, -1]
            done = last == self.eos_token_id[0]
            for other in self.eos_token_id[1:]:
                done |= last == other
        if self.stop is not None:
            stopped = self.stop(sequences)
            done = stopped if done is None else done | stopped
        return np.zeros(sequences.shape[0], bool) if done is None else done


def check_max_new_tokens(value: object) -> int:
    """``value`` as an int when it is a whole number >= 1; a :class:`GenerationError` if not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise GenerationError(f"max_new_tokens must be an int >= 1, got {value!r}.")
    return int(value)


def new_token_budget(max_new_tokens: object, max_length: object, prompt: int, folder: Any) -> int:
    """How many tokens to add, by transformers' rule.

    ``max_new_tokens`` when given; else ``max_length`` (the prompt included) less the
    prompt's ``prompt`` tokens; else generation_config.json's ``max_new_tokens``, else its
    ``max_length``. Its default (20, unset) means 20 new tokens, as long as the model's
    positions hold them (transformers adds the prompt's length to a default max_length).
    ``folder.setting(name)`` reads the configs.
    """
    if max_new_tokens is not None:
        return check_max_new_tokens(max_new_tokens)
    given = max_length is not None
    if not given:
        configured = folder.setting("max_new_tokens")
        if configured is not None:
            return check_max_new_tokens(configured)
        max_length = folder.setting("max_length")
        if max_length in (None, _DEFAULT_MAX_LENGTH):  # transformers: 20 new, in the positions
            limit = folder.config.get("max_position_embeddings")
            new = _DEFAULT_MAX_LENGTH
            if isinstance(limit, int) and prompt + new > limit:
                new = limit - prompt
            return check_max_new_tokens(max(new, 1))
    if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral):
        raise GenerationError(f"max_length must be an int, got {max_length!r}.")
    total = int(max_length)
    if total - prompt < 1:
        where = "" if given else " (generation_config.json's, or transformers' default)"
        raise GenerationError(
            f"max_length={total}{where} counts the prompt, which has {prompt} tokens: "
            "no room for new tokens. Pass max_new_tokens=N (the tokens to add), or a "
            "max_length above the prompt's length."
        )
    return total - prompt


#: transformers' ``GenerationConfig.max_length`` when nothing sets it.
_DEFAULT_MAX_LENGTH = 20


def _ragged(input_ids: Any) -> list[int] | None:
    """The row lengths when ``input_ids`` is a list of rows of different lengths."""
    if isinstance(input_ids, np.ndarray) or not isinstance(input_ids, list | tuple):
        return None
    rows = [r for r in input_ids if isinstance(r, list | tuple | np.ndarray)]
    if len(rows) != len(input_ids):
        return None
    lengths = [len(r) for r in rows]
    return lengths if len(set(lengths)) > 1 else None


def as_ids(input_ids: Any, name: str = "input_ids") -> npt.NDArray[np.int64]:
    """Token ids as an int64 (batch, length) array; one prompt may be 1-D."""
    lengths = _ragged(input_ids)
    if lengths is not None:
        raise GenerationError(
            f"{name} holds rows of different lengths {lengths}: left-pad them to one length "
            "and pass attention_mask with 0 on the padding (or call generate once per prompt)."
        )
    try:
        ids = np.asarray(input_ids)
    except ValueError as e:
        raise GenerationError(f"{name} must be a (batch, length) array of token ids: {e}") from e
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise GenerationError(
            f"{name} must be (batch, length) with batch and length >= 1, got shape {ids.shape}."
        )
    if not np.issubdtype(ids.dtype, np.integer):
        raise GenerationError(f"{name} must hold integer token ids, got dtype {ids.dtype}.")
    return ids.astype(np.int64)


def check_vocab(ids: npt.NDArray[np.int64], vocab: int | None, name: str = "input_ids") -> None:
    """A :class:`GenerationError` naming the ids outside ``[0, vocab)``."""
    if ids.size == 0 or vocab is None:
        return
    bad = np.unique(ids[(ids < 0) | (ids >= vocab)])
    if bad.size:
        raise GenerationError(
            f"{name} holds token ids {bad[:8].tolist()} outside the model's vocabulary "
            f"[0, {vocab}): pass ids from this model's tokenizer."
        )


def as_mask(attention_mask: Any, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The attention mask as int64, all ones when ``None``; its shape must be ``ids``'."""
    if attention_mask is None:
        return np.ones(ids.shape, dtype=np.int64)
    mask = np.asarray(attention_mask)
    if mask.ndim == 1:
        mask = mask[None]
    if mask.shape != ids.shape:
        raise GenerationError(
            f"attention_mask has shape {mask.shape}, input_ids {ids.shape}: they must match."
        )
    return mask.astype(np.int64)


def as_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator: ``seed`` itself when it is one, else seeded with it."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise GenerationError(f"seed must be an int or a numpy Generator, got {seed!r}.")
    return np.random.default_rng(seed)


def decode_steps(
    session: DecodeSession,
    first: Feed,
    next_feed: NextFeed,
    start: npt.NDArray[np.int64],
    chooser: TokenChooser,
    stopping: Stopping,
    rng: np.random.Generator,
    padding: npt.NDArray[np.int64] | None = None,
) -> Iterator[npt.NDArray[np.int64]]:
    """Greedy or sampled decoding, one step at a time: yields each step's sequences.

    Rows that ended (EOS, a stop string) continue with ``pad_token_id`` when an EOS token
    is set, as in transformers; the loop stops when every row has, or after
    ``max_new_tokens``.
    """
    batch = start.shape[0]
    past: Mapping[str, ort.OrtValue] = session.empty_past(batch)
    feed: Feed = first
    unfinished = np.ones(batch, dtype=bool)
    length = start.shape[1]
    max_length = length + stopping.max_new_tokens
    rows = np.empty((batch, max_length), np.int64)  # filled column by column
    rows[:, :length] = start
    sequences = rows[:, :length]
    pad = stopping.pad_token_id if stopping.eos_token_id else None
    can_stop = bool(stopping.eos_token_id) or stopping.stop is not None
    plain = chooser.passes_through()  # greedy, nothing to process: the largest logit
    # Right after a run the interpreter's caches are cold (the weights went through them):
    # each numpy call costs microseconds, so a step makes few. The padding of ended rows
    # and the check that all ended run only once a row has ended.
    padding_rows = False  # a row has ended and later tokens are pad_token_id
    for step in range(stopping.max_new_tokens):
        results = session.run({**feed, **past} if past else feed)
        logits = session.last_logits(results)
        if plain:
            tokens = logits.argmax(axis=-1)
        else:
            scores = chooser.process(
                logits, sequences, step=step, max_length=max_length, padding=padding
            )
            tokens = chooser.choose(scores, rng)
        if padding_rows and pad is not None:
            tokens = np.where(unfinished, tokens, pad).astype(np.int64)
        rows[:, length] = tokens
        length += 1
        sequences = rows[:, :length]
        ended = False
        if can_stop:
            done = stopping.hits(sequences)
            if done.any():
                unfinished &= ~done
                ended = not unfinished.any()
                padding_rows = pad is not None
        yield sequences
        if ended or step == stopping.max_new_tokens - 1:
            break
        past = session.next_past(results)
        feed = next_feed(tokens)


def decode(
    session: DecodeSession,
    first: Feed,
    next_feed: NextFeed,
    start: npt.NDArray[np.int64],
    chooser: TokenChooser,
    stopping: Stopping,
    seed: int | np.random.Generator | None,
    *,
    padding: npt.NDArray[np.int64] | None = None,
    streamer: Streamer | None = None,
) -> npt.NDArray[np.int64]:
    """Greedy or sampled decoding: ``start`` followed by the new tokens of each row.

    ``streamer``, when given, is called with each step's new tokens (batch,).
    """
    sequences = start
    steps = decode_steps(session, first, next_feed, start, chooser, stopping, as_rng(seed), padding)
    for sequences in steps:
        if streamer is not None:
            streamer(sequences[:, -1].copy())
    return sequences
