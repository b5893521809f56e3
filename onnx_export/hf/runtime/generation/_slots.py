"""The fused decoder's batch cache: one slot (a row of a shared buffer) per request.

A fused ``target="onnxruntime"`` decoder (``session.shares_buffer``) takes each row's
tokens first and counts them with the attention mask: GroupQueryAttention reads and writes
row b of the cache at its own count (``seqlens_k``), so rows of different lengths share
one (slots, kv heads, capacity, head size) buffer per past without padding them to one
another. The rows being decoded are the first ``n`` slots: ``buffer[:n]`` is contiguous,
so a step binds that view as both past and present and GQA writes each row's new token in
place. Requests that join together are prefilled in one run into consecutive slots, right-padded
to the longest prompt: with no past (the run's width is its sequence length) ORT's GQA takes
several rows of several new tokens, each row's count in ``seqlens_k``, and the graph's
logits are each row's last real token (a row's padding positions are written past its count,
where its next tokens overwrite them). A row that leaves is replaced by the last one (one row's
copy), so the live rows stay first. Slots and capacity double when a request needs more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from onnxruntime.capi import _pybind_state as _C

from onnx_export.hf.runtime._session import ONNX_TO_NUMPY, StepSession

__all__ = ["SlotCache"]


class SlotCache:
    """Shared past/present buffers with ``slots`` rows of ``capacity`` positions.

    Example:
        >>> cache = SlotCache(model.session, slots=4, capacity=64)  # doctest: +SKIP
        >>> cache.prefill(0, [1, 2, 3]).shape  # doctest: +SKIP
        (96,)
    """

    def __init__(self, session: StepSession, slots: int, capacity: int) -> None:
        self.slots, self.capacity = slots, capacity
        self._session = session
        self._sess = session.session._sess
        self._cpu = session.cpu_device
        self._arrays: list[npt.NDArray[Any]] = []
        for past in session.past_names:
            meta = session.input_meta(past)
            dtype = ONNX_TO_NUMPY.get(meta.type, np.float32)
            self._arrays.append(np.zeros((slots, meta.shape[1], capacity, meta.shape[3]), dtype))
        self._bindings: dict[tuple[int, int], tuple[Any, npt.NDArray[Any]]] = {}  # bound, logits
        self._positions = "position_ids" in session.input_names

    def grown(self, slots: int, capacity: int) -> SlotCache:
        """A cache of at least ``slots`` rows and ``capacity`` positions holding this one's."""
        bigger = SlotCache(self._session, max(slots, self.slots), max(capacity, self.capacity))
        for old, new in zip(self._arrays, bigger._arrays, strict=True):
            new[: self.slots, :, : self.capacity] = old
        return bigger

    def move(self, source: int, target: int) -> None:
        """Slot ``source``'s cache copied into slot ``target``."""
        for array in self._arrays:
            array[target] = array[source]

    def _binding(self, first: int, rows: int) -> tuple[Any, npt.NDArray[Any]]:
        """Rows ``first`` to ``first + rows`` bound as pasts and presents, and their logits."""
        key = (first, rows)
        if key not in self._bindings:
            binding = _C.SessionIOBinding(self._sess)
            names = zip(self._session.past_names, self._session.present_names, strict=True)
            for (past, present), array in zip(names, self._arrays, strict=True):
                value = _C.OrtValue.ortvalue_from_numpy(array[first : first + rows], self._cpu)
                binding.bind_ortvalue_input(past, value)
                binding.bind_ortvalue_output(present, value)
            for name, value in self._session.fixed_inputs.items():  # a LoRA adapter's
                binding.bind_ortvalue_input(name, value)
            meta = self._session.output_meta("logits")  # (batch, 1, vocab)
            logits = np.zeros((rows, 1, meta.shape[2]), ONNX_TO_NUMPY.get(meta.type, np.float32))
            binding.bind_ortvalue_output(
                "logits", _C.OrtValue.ortvalue_from_numpy(logits, self._cpu)
            )
            self._bindings[key] = binding, logits
        return self._bindings[key]

    def _run(
        self,
        bound: tuple[Any, npt.NDArray[Any]],
        ids: npt.NDArray[np.int64],
        mask: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float32]:
        binding, logits = bound
        binding.bind_input("input_ids", ids)
        binding.bind_input("attention_mask", mask)
        if self._positions:
            binding.bind_input("position_ids", positions)
        self._sess.run_with_iobinding(binding, self._session.run_options)
        return np.array(logits[:, 0, :], dtype=np.float32)

    def prefill(self, slot: int, prompt: list[int]) -> npt.NDArray[np.float32]:
        """Run ``prompt`` alone into ``slot``; its last logits (vocab,)."""
        length = len(prompt)
        ids = np.array([prompt], np.int64)
        positions = np.arange(length, dtype=np.int64)[None]
        mask = np.ones((1, length), np.int64)
        logits = self._run(self._binding(slot, 1), ids, mask, positions)
        return np.asarray(logits[0], dtype=np.float32)

    def prefill_many(self, first: int, prompts: list[list[int]]) -> npt.NDArray[np.float32]:
        """Run ``prompts`` together into slots ``first`` onward; their last logits (rows, vocab).

        Each row is right-padded to the longest prompt and gets the logits it gets alone.
        """
        rows, width = len(prompts), max(len(p) for p in prompts)
        ids = np.zeros((rows, width), np.int64)
        mask = np.zeros((rows, width), np.int64)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = prompt
            mask[row, : len(prompt)] = 1
        positions = np.broadcast_to(np.arange(width, dtype=np.int64), (rows, width)).copy()
        return self._run(self._binding(first, rows), ids, mask, positions)

    def step(
        self, tokens: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float32]:
        """One new token for each of the first ``len(tokens)`` slots; their logits (rows, vocab).

        ``counts``: each row's tokens once this one is in (its cached ones + 1).
        """
        rows = len(tokens)
        width = int(counts.max())
        mask = (np.arange(width)[None, :] < counts[:, None]).astype(np.int64)
        positions = (counts - 1).astype(np.int64)[:, None]
        return self._run(self._binding(0, rows), tokens.reshape(rows, 1), mask, positions)
