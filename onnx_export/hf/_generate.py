"""The decoding loop shared by the causal and the encoder-decoder runtimes."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onnx_export.hf._errors import GenerationError
from onnx_export.hf._logits import TokenChooser
from onnx_export.hf._pretrained import token_ids
from onnx_export.hf._session import StepSession

__all__ = ["Stopping", "decode", "as_ids", "as_mask"]

Feed = dict[str, "npt.NDArray[Any] | ort.OrtValue"]
#: Builds the next step's inputs (without the past) from the tokens just chosen.
NextFeed = Callable[[npt.NDArray[np.int64]], Feed]


@dataclasses.dataclass(frozen=True)
class Stopping:
    """When to stop and what to write after a row ends."""

    max_new_tokens: int
    eos_token_id: tuple[int, ...]
    pad_token_id: int | None

    @classmethod
    def resolve(cls, max_new_tokens: int, eos: Any, pad: int | None) -> Stopping:
        """Like transformers: ``pad`` defaults to the first EOS token."""
        max_new_tokens = check_max_new_tokens(max_new_tokens)
        eos_ids = token_ids(eos)
        if pad is None and eos_ids:
            pad = eos_ids[0]
        return cls(max_new_tokens, eos_ids, pad)


def check_max_new_tokens(value: object) -> int:
    """``value`` as an int when it is a whole number >= 1; a :class:`GenerationError` if not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise GenerationError(f"max_new_tokens must be an int >= 1, got {value!r}.")
    return int(value)


def as_ids(input_ids: Any, name: str = "input_ids") -> npt.NDArray[np.int64]:
    """Token ids as an int64 (batch, length) array; one prompt may be 1-D."""
    ids = np.asarray(input_ids)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise GenerationError(
            f"{name} must be (batch, length) with batch and length >= 1, got shape {ids.shape}."
        )
    if not np.issubdtype(ids.dtype, np.integer):
        raise GenerationError(f"{name} must hold integer token ids, got dtype {ids.dtype}.")
    return ids.astype(np.int64)


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


def decode(
    session: StepSession,
    first: Feed,
    next_feed: NextFeed,
    start: npt.NDArray[np.int64],
    chooser: TokenChooser,
    stopping: Stopping,
    seed: int | None,
) -> npt.NDArray[np.int64]:
    """Greedy or sampled decoding: ``start`` followed by the new tokens of each row.

    Rows that produced an EOS token continue with ``pad_token_id``; the loop stops when
    every row has, or after ``max_new_tokens``.
    """
    rng = np.random.default_rng(seed)
    batch = start.shape[0]
    past: Mapping[str, ort.OrtValue] = session.empty_past(batch)
    feed: Feed = first
    sequences = start
    unfinished = np.ones(batch, dtype=bool)
    max_length = start.shape[1] + stopping.max_new_tokens
    for step in range(stopping.max_new_tokens):
        results = session.run({**feed, **past})
        logits = np.array(results["logits"].numpy()[:, -1, :], dtype=np.float32)
        scores = chooser.process(
            logits, step=step, length=sequences.shape[1], max_length=max_length
        )
        tokens = chooser.choose(scores, rng)
        if stopping.eos_token_id and stopping.pad_token_id is not None:
            tokens = np.where(unfinished, tokens, stopping.pad_token_id).astype(np.int64)
        sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
        if stopping.eos_token_id:
            unfinished &= ~np.isin(tokens, stopping.eos_token_id)
        if not unfinished.any() or step == stopping.max_new_tokens - 1:
            break
        past = session.next_past(results)
        feed = next_feed(tokens)
    return sequences
