"""The decode steps of a fused decoder at fixed addresses and shapes: what CUDA graphs need.

ONNX Runtime's CUDA provider can record a run's kernels once and replay them
(``enable_cuda_graph``): no kernel launch from the host per op, which is most of a small
model's decode step. A replay reads and writes the same memory with the same shapes, so
every input and output of the step is bound once, at a fixed address, before the first
step, and each step writes its new values into those buffers:

- the cache: one (batch, kv heads, capacity, head size) buffer per past, bound as the past
  and as its present (``past_present_share_buffer``: GQA writes at ``seqlens_k``);
- ``input_ids`` (batch, 1) and ``position_ids`` (batch, 1): overwritten each step;
- ``attention_mask`` (batch, capacity): one more 1 per row each step. GQA reads only its
  sum (``seqlens_k``, each row's count of tokens - 1), so the mask is as wide as the cache
  from the first step on, zeros standing for the positions not written yet;
- ``logits`` (batch, 1, vocab): read back to the host after each step.

The prompt (a different shape) runs once without the graph (``gpu_graph_id`` -1), into the
same cache. The first decode steps record the graph (one ``gpu_graph_id`` per shape), later
ones replay it, also in later decodings of the same shape, which reuse the same buffers
(:class:`StaticCaches`). Without a graph id (on the CPU, where it is tested, or past
:data:`MAX_GRAPHS` shapes) the same buffers are used and nothing is recorded. Greedy and
sampled decoding only: beam search reorders the cache's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnxruntime.capi import _pybind_state as _C

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._cache_ops import ELEMENT_TYPES
from onnx_export.hf.runtime._session import StepSession, Value

__all__ = ["MAX_GRAPHS", "StaticCache", "StaticCaches"]

#: The ``RunOptions`` config key naming the CUDA graph a run records or replays.
GRAPH_ID_KEY = "gpu_graph_id"
#: The most shapes (batch, prompt + max_new_tokens) a session records graphs for; each holds
#: its buffers and its graph on the device. Further shapes run unrecorded.
MAX_GRAPHS = 8


class _Buffer:
    """A host array and the bound value at a fixed address that holds its contents."""

    def __init__(self, array: npt.NDArray[Any], device: str) -> None:
        self.array, self._copy = array, device != "cpu"
        # On the CPU the value wraps the array's memory; on a device it is a copy, refreshed
        self.value = ort.OrtValue.ortvalue_from_numpy(array, device, 0)

    def refresh(self) -> None:
        if self._copy:
            self.value.update_inplace(self.array)


def _allocate(shape: list[int], onnx_type: str, device: str) -> Any:
    """An uninitialised C ``OrtValue`` of ``onnx_type`` (by ONNX element type) on ``device``."""
    value = ort.OrtValue.ortvalue_from_shape_and_type(shape, ELEMENT_TYPES[onnx_type], device, 0)
    return value._ortvalue


class StaticCache:
    """One shape's buffers, ``capacity`` positions long, bound once (see above).

    Runs the steps of :func:`~onnx_export.hf.runtime.generation._generate.decode_steps`
    in place of the session, as :class:`~onnx_export.hf.runtime.generation._shared_cache.
    SharedCache` does on the CPU. A recorded graph replays these addresses, so the object is
    kept and reused by every decoding of the same (batch, capacity): :meth:`stepper` starts
    a new one in the same buffers.

    Attributes:
        batch: The rows the buffers hold.
        capacity: The most positions (prompt plus new tokens) the buffers hold.
        graph_id: The CUDA graph the decode steps record and replay (ORT's ``gpu_graph_id``),
            or ``None``: the same buffers, nothing recorded (the CPU, or too many shapes).
    """

    def __init__(
        self, session: StepSession, batch: int, capacity: int, graph_id: int | None
    ) -> None:
        self.batch, self.capacity, self.graph_id = batch, capacity, graph_id
        self._session, self._device = session, session.device
        self._run = session.session._sess.run_with_iobinding
        self._binding = _C.SessionIOBinding(session.session._sess)
        self._prompt_binding = _C.SessionIOBinding(session.session._sess)
        self._pasts = []  # the device memory the pasts and presents share
        for past, present in zip(session.past_names, session.present_names, strict=True):
            meta = session.input_meta(past)
            shape = [batch, meta.shape[1], capacity, meta.shape[3]]
            value = _allocate(shape, meta.type, self._device)
            self._pasts.append(value)
            for binding in (self._binding, self._prompt_binding):
                binding.bind_ortvalue_input(past, value)
                binding.bind_ortvalue_output(present, value)
        logits = session.output_meta("logits")
        self._logits = _allocate([batch, 1, logits.shape[2]], logits.type, self._device)
        self._binding.bind_ortvalue_output("logits", self._logits)
        self._prompt_binding.bind_output("logits", session.ort_device)
        self._prompt_options, self._step_options = _C.RunOptions(), _C.RunOptions()
        if graph_id is not None:
            self._prompt_options.add_run_config_entry(GRAPH_ID_KEY, "-1")
            self._step_options.add_run_config_entry(GRAPH_ID_KEY, str(graph_id))
        self._results: dict[str, Value] = {"logits": self._logits}
        # the step inputs, bound once: (batch, 1) tokens and positions, a cache-wide mask
        self._ids = _Buffer(np.zeros((batch, 1), np.int64), self._device)
        self._mask = _Buffer(np.zeros((batch, capacity), np.int64), self._device)
        self._positions = _Buffer(np.zeros((batch, 1), np.int64), self._device)
        self._steps = [self._ids, self._mask]
        if "position_ids" in session.input_names:
            self._steps.append(self._positions)
        names = ("input_ids", "attention_mask", "position_ids")
        for name, buffer in zip(names, self._steps, strict=False):
            self._binding.bind_ortvalue_input(name, buffer.value._ortvalue)

    def empty_past(self, batch: int) -> dict[str, Value]:
        """Nothing: the cache is bound already (``batch`` must be the buffers' rows)."""
        if batch != self.batch:
            raise GenerationError(f"This cache holds {self.batch} rows, not {batch}.")
        return {}

    def run(
        self, feed: Mapping[str, Any], outputs: Sequence[str] | None = None
    ) -> dict[str, Value]:
        """The prompt (``feed`` given, no graph), or a decode step on the bound buffers."""
        if not feed:
            for buffer in self._steps:
                buffer.refresh()
            self._run(self._binding, self._step_options)
            return self._results
        if int(feed["attention_mask"].shape[1]) > self.capacity:
            raise GenerationError(f"The prompt is longer than the cache's {self.capacity}.")
        for name, value in feed.items():
            self._prompt_binding.bind_input(name, np.ascontiguousarray(value))
        self._run(self._prompt_binding, self._prompt_options)
        outputs = self._prompt_binding.get_outputs()
        return {"logits": outputs[len(outputs) - 1]}  # bound last

    def stepper(
        self, mask: npt.NDArray[np.int64], positions: npt.NDArray[np.int64] | None
    ) -> Callable[[npt.NDArray[np.int64]], dict[str, Any]]:
        """The next-step feed after the prompt ``mask``: it writes into the bound buffers.

        ``positions`` are the prompt's last positions (batch, 1), or ``None`` when the graph
        does not read ``position_ids`` (its buffer then stays as it is).
        """
        start = mask.shape[1]
        if mask.shape[0] != self.batch:
            raise GenerationError(f"This cache holds {self.batch} rows, not {mask.shape[0]}.")
        ids, full, moved = self._ids.array, self._mask.array, self._positions.array
        full[:] = 0
        full[:, :start] = mask
        step = 0

        def next_feed(tokens: npt.NDArray[np.int64]) -> dict[str, Any]:
            nonlocal step
            if start + step >= self.capacity:
                raise GenerationError(f"The cache holds {self.capacity} positions, no more.")
            ids[:, 0] = tokens
            full[:, start + step] = 1  # GQA counts the ones: where they stand does not matter
            if positions is not None:
                moved[:, 0] = positions[:, 0] + 1 + step
            step += 1
            return {}

        return next_feed

    def next_past(self, results: Mapping[str, Value]) -> dict[str, Value]:
        """Nothing: the presents were written in place."""
        return {}

    def last_logits(self, results: Mapping[str, Value]) -> npt.NDArray[np.float32]:
        """The logits of each row's last position (batch, vocab), float32, on the host."""
        return self._session.host_logits(results["logits"])


class StaticCaches:
    """A session's :class:`StaticCache` of each shape, kept: a recorded graph replays them.

    Args:
        session: The decoder's session.
        record: Record CUDA graphs (the CUDA provider with ``enable_cuda_graph``).
    """

    def __init__(self, session: StepSession, record: bool) -> None:
        self._session, self._record = session, record
        self._caches: dict[tuple[int, int], StaticCache] = {}

    def get(self, batch: int, capacity: int) -> StaticCache:
        """The buffers for ``batch`` rows of ``capacity`` positions (made on first use)."""
        key = (batch, capacity)
        if key not in self._caches:
            recorded = sum(c.graph_id is not None for c in self._caches.values())
            graph_id = recorded if self._record and recorded < MAX_GRAPHS else None
            self._caches[key] = StaticCache(self._session, batch, capacity, graph_id)
        return self._caches[key]
