"""A decoder's cache as one preallocated buffer per past input, updated in place by GQA.

A ``target="onnxruntime"`` decoder whose pasts go to ``GroupQueryAttention`` only is
marked ``onnx_export.past_present_share_buffer`` by the export (``passes/ort_gqa.py``).
Its cache can then live where onnxruntime-genai keeps it: each ``past_key_values.*``
input and its ``present.*`` output are bound (one ``IOBinding``, made once) to the same
(batch, kv heads, capacity, head size) buffer; GQA writes the new keys and values at
``seqlens_k`` (from the attention mask's length) and reads no further, so nothing is
copied, allocated or renamed between steps. ``logits`` goes to a preallocated buffer too.

Batch rows cannot be reordered in such a buffer without a copy: beam search keeps the
per-step presents of :class:`~onnx_export.hf.runtime._session.StepSession`. A live sequence
(``hf/runtime/generation/_live.py``) grows its cache when it fills up and rewinds by reading
less of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from onnxruntime.capi import _pybind_state as _C

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._session import ONNX_TO_NUMPY, StepSession, Value, host_float32

__all__ = ["SharedCache"]

#: The fused decoder's ``num_logits_to_keep`` input (``passes/ort_gqa.py``).
_KEEP = "num_logits_to_keep"


def _buffer(meta: Any, shape: Sequence[int]) -> npt.NDArray[Any]:
    return np.zeros(shape, dtype=ONNX_TO_NUMPY.get(meta.type, np.float32))


class SharedCache:
    """One decoding's cache, ``capacity`` positions long, shared by the pasts and presents.

    Runs the steps of :func:`~onnx_export.hf.runtime.generation._generate.decode_steps`
    in place of the session: :meth:`empty_past` and :meth:`next_past` are empty (the cache stays
    bound), :meth:`run` binds the step's other inputs and runs. :meth:`stepper` gives the loop a
    next-step feed that writes the new tokens, positions and mask into bound buffers
    instead (no binding or array built per step). CPU only.

    Attributes:
        batch: The rows the buffers hold.
        capacity: The most positions (prompt plus new tokens) the buffers hold.
    """

    def __init__(self, session: StepSession, batch: int, capacity: int) -> None:
        self.batch, self.capacity = batch, capacity
        self._session = session
        self._run = session.session._sess.run_with_iobinding
        self._options = session.run_options
        self._binding = _C.SessionIOBinding(session.session._sess)
        self._cpu = cpu = session.cpu_device
        self._arrays: list[npt.NDArray[Any]] = []  # the memory the bound values wrap
        for past, present in zip(session.past_names, session.present_names, strict=True):
            meta = session.input_meta(past)
            self._arrays.append(_buffer(meta, (batch, meta.shape[1], capacity, meta.shape[3])))
            value = _C.OrtValue.ortvalue_from_numpy(self._arrays[-1], cpu)
            self._binding.bind_ortvalue_input(past, value)
            self._binding.bind_ortvalue_output(present, value)
        for name, value in session.fixed_inputs.items():  # a LoRA adapter's factors
            self._binding.bind_ortvalue_input(name, value)
        meta = session.output_meta("logits")
        self._logits = _buffer(meta, (batch, 1, meta.shape[2]))  # one a row (see run_chunk)
        self._logits_value = _C.OrtValue.ortvalue_from_numpy(self._logits, cpu)
        self._binding.bind_ortvalue_output("logits", self._logits_value)
        self._results = {"logits": self._logits}
        self._last = self._logits[:, -1, :]
        self._float32 = self._last.dtype == np.float32
        self._total = 0
        self._step_arrays: list[Any] = []  # the step inputs' memory (see stepper)
        self._keep_array = np.ones(1, np.int64)  # a verification step's count
        self._keep_value = _C.OrtValue.ortvalue_from_numpy(self._keep_array, cpu)
        self._chunk: dict[str, Any] | None = None  # run_chunk's arrays and bindings

    def grown(self, capacity: int, filled: int) -> SharedCache:
        """A cache of ``capacity`` positions holding this one's first ``filled``."""
        bigger = SharedCache(self._session, self.batch, capacity)
        for old, new in zip(self._arrays, bigger._arrays, strict=True):
            new[:, :, :filled] = old[:, :, :filled]
        return bigger

    def empty_past(self, batch: int) -> dict[str, Value]:
        """Nothing: the cache is bound already (``batch`` must be the buffers' rows)."""
        if batch != self.batch:
            raise GenerationError(f"This cache holds {self.batch} rows, not {batch}.")
        return {}

    def run(
        self, feed: Mapping[str, Any], outputs: Sequence[str] | None = None
    ) -> dict[str, Value]:
        """One step on the bound cache; ``feed`` holds the inputs other than the pasts.

        An empty ``feed`` runs on what :meth:`stepper`'s feed wrote. Returns ``{"logits":
        ...}``, the preallocated logits buffer; the presents are in the cache.
        """
        if feed:
            self._chunk = None  # run_chunk binds its own values again after this
            for name, value in feed.items():
                if name == _KEEP:  # an initializer input: bound as a value (no input meta)
                    self._keep_array[:] = value
                    self._binding.bind_ortvalue_input(name, self._keep_value)
                else:
                    self._binding.bind_input(name, value)
            self._total = int(feed["attention_mask"].shape[1])
        if self._total > self.capacity:
            raise GenerationError(
                f"The sequence reached {self._total} positions, past the cache's {self.capacity}."
            )
        self._run(self._binding, self._options)
        return self._results

    def run_chunk(
        self, tokens: list[int], start: int, wanted: int, positions: bool
    ) -> npt.NDArray[Any]:
        """One row's ``tokens`` after the ``start`` it holds: the last ``wanted`` logits.

        ``positions``: bind the tokens' positions (else a graph input ``position_ids``,
        which the graph then never reads, is bound once).

        The tokens are written into a buffer of ``capacity`` ids, and the step binds views
        of arrays made once (those ids, the mask's ones, the positions' range), wrapped the
        first time each length is seen (the positions: each step); ``num_logits_to_keep``
        and the ids are bound only when their length changes. One position's logits come
        in the bound buffer (returned as a view of it, valid until the next run); several
        (a verification step) in a buffer ORT allocates, since the graph declares one.
        Returns (wanted, vocab), of the graph's logits type (bfloat16 widened to float32).
        """
        total = start + len(tokens)
        if total > self.capacity:
            raise GenerationError(
                f"The sequence reached {total} positions, past the cache's {self.capacity}."
            )
        chunk = self._chunk
        if chunk is None:
            chunk = self._chunk = self._chunk_arrays()
            if not positions and "position_ids" in self._session.input_names:
                unread = chunk["unread"] = np.zeros((1, 1), np.int64)  # never read
                self._binding.bind_ortvalue_input("position_ids", chunk["wrap"](unread))
        bind = self._binding.bind_ortvalue_input
        count = len(tokens)
        chunk["ids"][0, :count] = tokens
        if count != chunk["count"]:
            value = chunk["ids_values"].get(count)
            if value is None:
                value = chunk["ids_values"][count] = chunk["wrap"](chunk["ids"][:, :count])
            bind("input_ids", value)
            chunk["count"] = count
        masks = chunk["masks"]
        mask = masks[total]
        if mask is None:
            mask = masks[total] = chunk["wrap"](chunk["ones"][:, :total])
        bind("attention_mask", mask)
        if positions:
            bind("position_ids", chunk["wrap"](chunk["range"][:, start:total]))
        self._total = total
        if wanted != chunk["kept"]:
            keep = chunk["keep"].get(wanted)
            if keep is None:
                array = np.array([wanted], np.int64)
                keep = chunk["keep"][wanted] = (array, chunk["wrap"](array))
            bind(_KEEP, keep[1])
            chunk["kept"] = wanted
        if wanted == 1:
            if chunk["bound"] != 1:  # the bound one-position buffer again
                self._binding.bind_ortvalue_output("logits", self._logits_value)
                chunk["bound"] = 1
            self._run(self._binding, self._options)
            return self._last[0:1]
        # several positions: the graph declares one, so ORT allocates them (bound anew
        # each time: ORT would hold the next step to the last one's shape)
        self._binding.bind_output("logits", self._cpu)
        chunk["bound"] = wanted
        self._run(self._binding, self._options)
        index = len(self._session.present_names)  # logits: bound last, in __init__
        logits: npt.NDArray[Any] = host_float32(self._binding.get_outputs()[index])[0]
        return logits

    def _chunk_arrays(self) -> dict[str, Any]:
        """run_chunk's arrays, made once: ids, mask, positions, and the values wrapping them."""
        cpu = self._cpu

        def wrap(array: npt.NDArray[Any]) -> Any:
            return _C.OrtValue.ortvalue_from_numpy(array, cpu)

        return {
            "wrap": wrap,
            "ids": np.zeros((1, self.capacity), np.int64),
            "ids_values": {},
            "count": -1,
            "ones": np.ones((1, self.capacity), np.int64),
            "masks": [None] * (self.capacity + 1),
            "range": np.arange(self.capacity, dtype=np.int64)[None],
            "keep": {},
            "kept": 1,
            "bound": 1,
        }

    def stepper(
        self, mask: npt.NDArray[np.int64], positions: npt.NDArray[np.int64] | None
    ) -> Callable[[npt.NDArray[np.int64]], dict[str, Any]]:
        """The next-step feed after the prompt ``mask``: it writes into bound buffers.

        Each call takes the tokens just chosen (batch,), writes them into the bound
        ``input_ids`` buffer, binds the step's ``position_ids`` (the prompt's last ones,
        (batch, 1), plus the step) and the mask one longer, all made before the first
        step (one row: views of one mask), and returns an empty feed for :meth:`run`.
        ``positions`` is ``None`` when the graph takes no ``position_ids`` or never reads
        them (GQA rotating at the physical positions): a graph input is then bound once.
        Right after a run the interpreter's caches are cold, so a step does few calls.
        """
        batch, start = mask.shape
        self._chunk = None  # run_chunk binds its own values again after this
        steps = self.capacity - start
        wrap, cpu, binding = _C.OrtValue.ortvalue_from_numpy, self._cpu, self._binding
        bind = binding.bind_ortvalue_input
        full = np.ones((batch, self.capacity), np.int64)
        full[:, :start] = mask
        ids = np.zeros((batch, 1), np.int64)
        # one row: each step's mask is a view; more: a copy each step (a slice is strided)
        masks = [wrap(full[:, : start + i + 1], cpu) for i in range(steps)] if batch == 1 else []
        rows = None  # (steps, batch): row i is step i's positions, contiguous
        if positions is not None:
            rows = np.ascontiguousarray((positions + 1 + np.arange(steps)[None, :]).T)
        moves = [] if rows is None else [wrap(rows[i].reshape(batch, 1), cpu) for i in range(steps)]
        unread = None
        if rows is None and "position_ids" in self._session.input_names:
            unread = np.zeros((batch, 1), np.int64)  # bound once: the graph never reads it
        self._step_arrays = [full, ids, rows, masks, moves, unread, None]  # the bound memory
        step = 0

        def next_feed(tokens: npt.NDArray[np.int64]) -> dict[str, Any]:
            nonlocal step
            i = step
            if i >= steps:
                raise GenerationError(f"The cache holds {self.capacity} positions, no more.")
            if i == 0:  # after the prompt: the one-token input, bound once
                bind("input_ids", wrap(ids, cpu))
                if unread is not None:
                    bind("position_ids", wrap(unread, cpu))
            ids[:, 0] = tokens
            if moves:
                bind("position_ids", moves[i])
            if masks:
                bind("attention_mask", masks[i])
            else:
                step_mask = np.ascontiguousarray(full[:, : start + i + 1])
                self._step_arrays[-1] = step_mask  # alive until the next step
                bind("attention_mask", wrap(step_mask, cpu))
            self._total = start + i + 1
            step = i + 1
            return {}

        return next_feed

    def next_past(self, results: Mapping[str, Value]) -> dict[str, Value]:
        """Nothing: the presents were written in place."""
        return {}

    def last_logits(self, results: Mapping[str, Value]) -> npt.NDArray[np.float32]:
        """The logits of each row's last position (batch, vocab), float32.

        A view of the logits buffer (no copy), valid until the next :meth:`run`.
        """
        return self._last if self._float32 else self._last.astype(np.float32)
