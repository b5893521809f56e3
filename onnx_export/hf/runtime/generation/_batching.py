"""Continuous batching: requests join and leave one decoding loop between steps.

A :class:`ContinuousBatcher` holds the rows being decoded in one batch cache. The requests
waiting at a step are prefilled together (up to :data:`PREFILL_ROWS` rows a run, left-padded
to the longest prompt, the padding masked and each row's positions counting its own tokens)
and join at that step: their cache goes into
the batch left-padded to the batch's length (or the batch is left-padded to theirs), the
attention mask marks the padding, and each row's positions count its own tokens, so each row
attends to its own tokens only, as a left-padded batch of ``generate()`` does. A row that
ends (an end token or its ``max_new_tokens``) leaves before the next step, and columns no
remaining row reads are cut from the cache. Each request gets the tokens greedy
``generate()`` gives it alone.

The cache moves through numpy only when rows join or leave; between those steps the
presents are fed back as ONNX Runtime values. Greedy decoding unless a request brings its
own ``choose`` (sampling, structured output); :meth:`ContinuousBatcher.cancel` drops a
request between steps.

On the fused ``target="onnxruntime"`` decoder (``session.shares_buffer``) the rows live
in slots of one shared buffer instead (``_slots.py``): each row's tokens first, its own
count in the attention mask (GroupQueryAttention's ``seqlens_k``), nothing padded or cut
when rows join or leave, and every step writes in place; requests joining together are
prefilled in one run into consecutive slots (right-padded: ``SlotCache.prefill_many``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._session import StepSession, Value
from onnx_export.hf.runtime.generation._slots import SlotCache
from onnx_export.hf.runtime.generation._speculative import LOGITS_TO_KEEP, keeps_logits

__all__ = ["BatchedRequest", "ContinuousBatcher", "Choose"]

#: Picks a row's next token from its logits (vocab,), float32; greedy when not given.
Choose = Callable[[npt.NDArray[np.float32]], int]

#: The fused decoder's first slots and positions (each doubles when a request needs more).
_FIRST_SLOTS, _FIRST_CAPACITY = 4, 64
#: Waiting requests prefilled together in one run at most (a longer queue takes more runs).
PREFILL_ROWS = 8
#: ``num_logits_to_keep`` for a prefill: the last position's logits only.
_ONE = np.array([1], np.int64)


@dataclasses.dataclass
class BatchedRequest:
    """One request of a :class:`ContinuousBatcher`.

    Attributes:
        id: The number :meth:`ContinuousBatcher.submit` returned.
        prompt: The prompt's tokens.
        max_new_tokens: How many tokens to add at most.
        eos: The tokens that end it.
        tokens: The new tokens so far.
        choose: Picks each next token from the row's logits (sampling, masks); the
            largest logit when ``None``.
    """

    id: int
    prompt: list[int]
    max_new_tokens: int
    eos: frozenset[int]
    tokens: list[int] = dataclasses.field(default_factory=list)
    choose: Choose | None = None

    @property
    def done(self) -> bool:
        """It made ``max_new_tokens`` or an end token."""
        return len(self.tokens) >= self.max_new_tokens or bool(
            self.tokens and self.tokens[-1] in self.eos
        )


class ContinuousBatcher:
    """Greedy decoding of many requests in one loop, admitted and retired between steps.

    Example:
        >>> batcher = ContinuousBatcher(model.session, uses_positions=True)  # doctest: +SKIP
        >>> first = batcher.submit([1, 2, 3], max_new_tokens=4)  # doctest: +SKIP
        >>> for request in batcher.run():  # doctest: +SKIP
        ...     print(request.id, request.tokens)
    """

    def __init__(
        self,
        session: StepSession,
        *,
        uses_positions: bool,
        vocab: int | None = None,
        limit: int | None = None,
    ):
        if session.pads_right and not session.shares_buffer:
            raise GenerationError(
                "Continuous batching runs the fused target='onnxruntime' decoder on its shared "
                "cache, on the CPU: this session cannot bind one (another device, or a cache "
                "dtype numpy lacks). Use the CPU provider or the default target."
            )
        self._slots: SlotCache | None = None
        self._fused = session.shares_buffer
        self._keeps = keeps_logits(session)
        self._session = session
        self._uses_positions = uses_positions
        self._vocab = vocab
        self._limit = limit  # the model's positions: a request's prompt + new tokens at most
        self._waiting: list[BatchedRequest] = []
        self._rows: list[BatchedRequest] = []
        self._past: dict[str, Any] = {}
        self._mask = np.zeros((0, 0), np.int64)
        self._next_id = 0
        #: Decoding steps run (each advances every row by one token).
        self.steps = 0

    def submit(
        self,
        prompt: Sequence[int],
        *,
        max_new_tokens: int,
        eos_token_id: int | Sequence[int] | None = None,
        choose: Choose | None = None,
    ) -> int:
        """Queue a request; it joins the batch at the next step. Returns its id.

        ``choose`` picks the request's tokens from its logits (greedy when ``None``).
        """
        ids = [int(t) for t in prompt]
        if not ids or (self._vocab is not None and not all(0 <= t < self._vocab for t in ids)):
            raise GenerationError(
                f"submit() takes a non-empty list of token ids in [0, {self._vocab}), got "
                f"{list(prompt)[:8]}."
            )
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise GenerationError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}.")
        if max_new_tokens < 1:
            raise GenerationError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}.")
        if self._limit is not None and len(ids) + max_new_tokens > self._limit:
            raise GenerationError(
                f"The prompt's {len(ids)} tokens plus max_new_tokens={max_new_tokens} pass the "
                f"model's {self._limit} positions: lower max_new_tokens or shorten the prompt."
            )
        eos = (
            ()
            if eos_token_id is None
            else ((eos_token_id,) if isinstance(eos_token_id, int) else tuple(eos_token_id))
        )
        request = BatchedRequest(self._next_id, ids, max_new_tokens, frozenset(eos), choose=choose)
        self._next_id += 1
        self._waiting.append(request)
        return request.id

    def cancel(self, request_id: int) -> bool:
        """Drop a request (waiting or in the batch) now; False when it is not here.

        Call it between steps: the row leaves the batch and its cache columns go.
        """
        for i, request in enumerate(self._waiting):
            if request.id == request_id:
                del self._waiting[i]
                return True
        for i, request in enumerate(self._rows):
            if request.id == request_id:
                self._retire([i])
                return True
        return False

    @property
    def active(self) -> int:
        """Requests in the batch now."""
        return len(self._rows)

    def run(self) -> Iterator[BatchedRequest]:
        """Step until every request submitted (also while running) is done; yields each."""
        while self._waiting or self._rows:
            yield from self.step()

    def step(self) -> list[BatchedRequest]:
        """Admit the waiting requests, run one step, retire the rows that ended."""
        waiting, self._waiting = self._waiting, []
        waiting.sort(key=lambda r: len(r.prompt))  # a run's rows of like lengths: less padding
        finished: list[BatchedRequest] = []
        for start in range(0, len(waiting), PREFILL_ROWS):
            group = waiting[start : start + PREFILL_ROWS]
            finished += self._admit_slots(group) if self._fused else self._admit(group)
        if self._rows:
            self._decode()
        ended = [i for i, r in enumerate(self._rows) if r.done]
        if ended:
            finished += [self._rows[i] for i in ended]
            self._retire(ended)
        return finished

    def _admit(self, requests: list[BatchedRequest]) -> list[BatchedRequest]:
        """Prefill ``requests`` together (left-padded); they join the batch. Returns the done.

        A request done after its first token does not join.
        """
        rows, width = len(requests), max(len(r.prompt) for r in requests)
        ids = np.zeros((rows, width), np.int64)
        mask = np.zeros((rows, width), np.int64)
        for row, request in enumerate(requests):
            ids[row, width - len(request.prompt) :] = request.prompt
            mask[row, width - len(request.prompt) :] = 1
        feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if self._uses_positions:  # each row counts its own tokens (padding at 1, as HF's)
            feed["position_ids"] = np.where(mask == 1, mask.cumsum(axis=1) - 1, 1)
        if self._keeps:  # the head runs on the last position only, not on every prompt token
            feed[LOGITS_TO_KEEP] = _ONE
        results = self._session.run({**feed, **self._session.empty_past(rows)})
        logits = self._session.last_logits(results)
        for row, request in enumerate(requests):
            request.tokens.append(_pick(request, logits[row]))
        keep = [row for row, request in enumerate(requests) if not request.done]
        if keep:
            past = {n: _array(v)[keep] for n, v in self._session.next_past(results).items()}
            mask = mask[keep]
            start = int((mask != 0).any(axis=0).argmax())  # columns no row reads go
            past = {n: np.ascontiguousarray(v[:, :, start:]) for n, v in past.items()}
            self._join([requests[row] for row in keep], past, mask[:, start:])
        return [request for request in requests if request.done]

    def _join(
        self,
        requests: list[BatchedRequest],
        past: dict[str, npt.NDArray[Any]],
        mask: npt.NDArray[Any],
    ) -> None:
        if not self._rows:
            self._rows, self._past, self._mask = list(requests), past, mask
            return
        batch = {n: _array(v) for n, v in self._past.items()}
        width = max(self._mask.shape[1], mask.shape[1])
        self._past = {
            n: np.concatenate([_left_pad(batch[n], width), _left_pad(past[n], width)], axis=0)
            for n in batch
        }
        self._mask = np.concatenate([_left_pad(self._mask, width), _left_pad(mask, width)], axis=0)
        self._rows.extend(requests)

    def _admit_slots(self, requests: list[BatchedRequest]) -> list[BatchedRequest]:
        """Prefill ``requests`` together into the first free slots; they join the batch.

        The cache grows if it must. Returns the ones done after their first token.
        """
        need = max(len(r.prompt) + r.max_new_tokens for r in requests)
        first = len(self._rows)
        slots = first + len(requests)
        limit = self._limit or need
        if self._slots is None:
            capacity = max(need, min(_FIRST_CAPACITY, limit))
            self._slots = SlotCache(self._session, max(_FIRST_SLOTS, slots), capacity)
        elif slots > self._slots.slots or need > self._slots.capacity:
            grown = self._slots.slots
            while grown < slots:
                grown *= 2
            capacity = self._slots.capacity
            if need > capacity:  # doubled, within the model's positions
                capacity = max(need, min(2 * capacity, limit))
            self._slots = self._slots.grown(grown, capacity)
        logits = self._slots.prefill_many(first, [r.prompt for r in requests])
        for request, row in zip(requests, logits, strict=True):
            request.tokens.append(_pick(request, row))
        self._rows.extend(requests)
        done = [first + i for i, request in enumerate(requests) if request.done]
        if done:
            self._retire_slots(done)
        return [request for request in requests if request.done]

    def _decode_slots(self) -> None:
        assert self._slots is not None  # rows were admitted
        tokens = np.array([r.tokens[-1] for r in self._rows], np.int64)
        counts = np.array([len(r.prompt) + len(r.tokens) for r in self._rows], np.int64)
        logits = self._slots.step(tokens, counts)
        for request, row in zip(self._rows, logits, strict=True):
            request.tokens.append(_pick(request, row))
        self.steps += 1

    def _retire_slots(self, ended: list[int]) -> None:
        """Each row that ended is replaced by the last live row (its slot copied)."""
        assert self._slots is not None  # rows were admitted
        for index in sorted(ended, reverse=True):
            last = len(self._rows) - 1
            if index != last:
                self._slots.move(last, index)
                self._rows[index] = self._rows[last]
            self._rows.pop()

    def _decode(self) -> None:
        if self._fused:
            self._decode_slots()
            return
        rows = len(self._rows)
        self._mask = np.concatenate([self._mask, np.ones((rows, 1), np.int64)], axis=1)
        feed: dict[str, Any] = {
            "input_ids": np.array([[r.tokens[-1]] for r in self._rows], np.int64),
            "attention_mask": self._mask,
        }
        if self._uses_positions:
            feed["position_ids"] = self._mask.sum(axis=1, keepdims=True) - 1
        results = self._session.run({**feed, **self._past})
        self._past = self._session.next_past(results)
        logits = self._session.last_logits(results)
        tokens = logits.argmax(axis=-1).tolist()
        for i, request in enumerate(self._rows):
            chosen = tokens[i] if request.choose is None else request.choose(logits[i])
            request.tokens.append(int(chosen))
        self.steps += 1

    def _retire(self, ended: list[int]) -> None:
        if self._fused:
            self._retire_slots(ended)
            return
        gone = set(ended)
        keep = [i for i in range(len(self._rows)) if i not in gone]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._past, self._mask = {}, np.zeros((0, 0), np.int64)
            return
        mask = self._mask[keep]
        start = int((mask != 0).any(axis=0).argmax())  # columns no row reads go
        self._mask = mask[:, start:]
        self._past = {
            n: np.ascontiguousarray(_array(v)[keep][:, :, start:]) for n, v in self._past.items()
        }


def _pick(request: BatchedRequest, logits: npt.NDArray[np.float32]) -> int:
    """The request's next token from its logits (vocab,)."""
    return int(logits.argmax() if request.choose is None else request.choose(logits))


def _left_pad(array: npt.NDArray[Any], width: int) -> npt.NDArray[Any]:
    """``array`` padded with zeros on the left of its sequence axis (2 for a cache, else 1)."""
    axis = 2 if array.ndim == 4 else 1
    missing = width - array.shape[axis]
    if missing <= 0:
        return array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (missing, 0)
    return np.pad(array, pad)


def _array(value: Value | npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A cache value (an ONNX Runtime value or already numpy) as numpy."""
    return value if isinstance(value, np.ndarray) else np.asarray(value.numpy())
