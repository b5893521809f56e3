"""A decoder's cache as one preallocated buffer per past input, updated in place by GQA.

A ``target="onnxruntime"`` decoder whose pasts go to ``GroupQueryAttention`` only is
marked ``onnx_export.past_present_share_buffer`` by the export (``passes/ort_gqa.py``).
Its cache can then live where onnxruntime-genai keeps it: each ``past_key_values.*``
input and its ``present.*`` output are bound (one ``IOBinding``, made once) to the same
(batch, kv heads, capacity, head size) buffer; GQA writes the new keys and values at
``seqlens_k`` (from the attention mask's length) and reads no further, so nothing is
copied, allocated or renamed between steps. ``logits`` goes to a preallocated buffer too.

Batch rows cannot be reordered in such a buffer without a copy: beam search keeps the
per-step presents of :class:`~onnx_export.hf._session.StepSession`. A live sequence
(``hf/_live.py``) grows its cache when it fills up and rewinds by reading less of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from onnxruntime.capi import _pybind_state as _C

from onnx_export.hf._errors import GenerationError
from onnx_export.hf._session import ONNX_TO_NUMPY, StepSession, Value

__all__ = ["SharedCache"]


def _buffer(meta: Any, shape: Sequence[int]) -> npt.NDArray[Any]:
    return np.zeros(shape, dtype=ONNX_TO_NUMPY.get(meta.type, np.float32))


class SharedCache:
    """One decoding's cache, ``capacity`` positions long, shared by the pasts and presents.

    Runs the steps of :func:`~onnx_export.hf._generate.decode_steps` in place of the
    session: :meth:`empty_past` and :meth:`next_past` are empty (the cache stays bound),
    :meth:`run` binds the step's other inputs and runs. CPU only.

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
        cpu = session.cpu_device
        self._arrays: list[npt.NDArray[Any]] = []  # the memory the bound values wrap
        for past, present in zip(session.past_names, session.present_names, strict=True):
            meta = session.input_meta(past)
            if not all(isinstance(d, int) for d in meta.shape[1:2] + meta.shape[3:]):
                raise GenerationError(f"{past} has no static head count and size: {meta.shape}.")
            self._arrays.append(_buffer(meta, (batch, meta.shape[1], capacity, meta.shape[3])))
            value = _C.OrtValue.ortvalue_from_numpy(self._arrays[-1], cpu)
            self._binding.bind_ortvalue_input(past, value)
            self._binding.bind_ortvalue_output(present, value)
        logits = session.output_meta("logits")
        if isinstance(logits.shape[1], int) and isinstance(logits.shape[2], int):
            self._logits: npt.NDArray[Any] | None = _buffer(
                logits, (batch, logits.shape[1], logits.shape[2])
            )
            self._logits_value = _C.OrtValue.ortvalue_from_numpy(self._logits, cpu)
            self._binding.bind_ortvalue_output("logits", self._logits_value)
        else:  # not a fused decoder's (batch, 1, vocab): ORT allocates it each step
            self._logits = None
            self._binding.bind_output("logits", cpu)

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

        Returns ``{"logits": ...}`` (a numpy array, or ORT's value when the logits have no
        static shape); the presents are in the buffers.
        """
        binding = self._binding
        for name, value in feed.items():
            binding.bind_input(name, value)
        total = feed["attention_mask"].shape[1]
        if total > self.capacity:
            raise GenerationError(
                f"The sequence reached {total} positions, past the cache's {self.capacity}."
            )
        self._run(binding, self._options)
        if self._logits is not None:
            return {"logits": self._logits}
        return {"logits": binding.get_outputs()[len(self._arrays) * 2]}

    def next_past(self, results: Mapping[str, Value]) -> dict[str, Value]:
        """Nothing: the presents were written in place."""
        return {}

    def last_logits(self, results: Mapping[str, Value]) -> npt.NDArray[np.float32]:
        """The logits of each row's last position (batch, vocab), float32, a copy."""
        logits = results["logits"]
        array = logits if isinstance(logits, np.ndarray) else logits.numpy()
        return np.array(array[:, -1, :], dtype=np.float32)
