"""One ONNX Runtime session run step after step, its cache kept as ORT values.

Inputs and outputs go through an IOBinding: on CUDA the presents stay on the device and
are bound as the next step's pasts without a copy; on CPU the same code keeps them as
``OrtValue``s, so no step converts the cache to numpy.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onnx_export.adapters._session_checks import resolve_providers
from onnx_export.hf._errors import CheckpointError

__all__ = ["StepSession", "PAST_PREFIX", "PRESENT_PREFIX"]

PAST_PREFIX = "past_key_values."
PRESENT_PREFIX = "present."

_ONNX_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


class StepSession:
    """An ``InferenceSession`` with the names of its cache inputs and outputs.

    Attributes:
        session: The onnxruntime session.
        device: ``"cuda"`` when the CUDA provider runs it, else ``"cpu"``.
        input_names: The graph's input names.
        past_names: ``past_key_values.*`` inputs, in graph order.
        present_names: The ``present.*`` output feeding each past input.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
    ) -> None:
        if not pathlib.Path(path).is_file():
            raise CheckpointError(f"{os.fspath(path)!r} is missing from the exported folder.")
        resolved = resolve_providers(providers, ort.get_available_providers())
        self.session = ort.InferenceSession(
            os.fspath(path), sess_options=session_options, providers=resolved
        )
        self.device = "cuda" if "CUDAExecutionProvider" in self.session.get_providers() else "cpu"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._inputs = {i.name: i for i in self.session.get_inputs()}
        self.past_names = [n for n in self.input_names if n.startswith(PAST_PREFIX)]
        self.present_names = [PRESENT_PREFIX + n[len(PAST_PREFIX) :] for n in self.past_names]
        missing = [n for n in self.present_names if n not in self.output_names]
        if missing:
            raise CheckpointError(
                f"{os.fspath(path)!r} has past inputs without matching outputs {missing}: "
                "it was not exported by onnx_export.hf.export_pretrained."
            )

    def empty_past(self, batch: int) -> dict[str, ort.OrtValue]:
        """Past keys and values of length 0 for a batch of ``batch``."""
        feed = {}
        for name in self.past_names:
            meta = self._inputs[name]
            shape = [batch, *(d if isinstance(d, int) else 0 for d in meta.shape[1:])]
            dtype = _ONNX_TO_NUMPY.get(meta.type, np.float32)
            feed[name] = self.to_device(np.zeros(shape, dtype=dtype))
        return feed

    def to_device(self, array: npt.NDArray[Any]) -> ort.OrtValue:
        """``array`` as an ``OrtValue`` on the session's device."""
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)

    def run(
        self,
        feed: Mapping[str, npt.NDArray[Any] | ort.OrtValue],
        outputs: Sequence[str] | None = None,
    ) -> dict[str, ort.OrtValue]:
        """Run one step; the outputs (all by default) stay ``OrtValue``s on the device.

        ``logits`` is the exception: it is bound to the CPU, where the next token is chosen.
        """
        binding = self.session.io_binding()
        for name, value in feed.items():
            if isinstance(value, ort.OrtValue):
                binding.bind_ortvalue_input(name, value)
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        names = list(outputs or self.output_names)
        for name in names:
            binding.bind_output(name, "cpu" if name == "logits" else self.device)
        self.session.run_with_iobinding(binding)
        return dict(zip(names, binding.get_outputs(), strict=True))

    def next_past(self, results: Mapping[str, ort.OrtValue]) -> dict[str, ort.OrtValue]:
        """The presents of a step, renamed as the next step's pasts."""
        return {p: results[q] for p, q in zip(self.past_names, self.present_names, strict=True)}

    def last_logits(self, results: Mapping[str, ort.OrtValue]) -> npt.NDArray[np.float32]:
        """The logits of each row's last position (batch, vocab), a float32 copy."""
        return np.array(results["logits"].numpy()[:, -1, :], dtype=np.float32)

    def reorder(
        self, past: Mapping[str, ort.OrtValue], rows: npt.NDArray[np.int64]
    ) -> dict[str, ort.OrtValue]:
        """``past`` with its batch rows taken in the order ``rows`` (beam search)."""
        if np.array_equal(rows, np.arange(len(rows))):
            return dict(past)
        return {n: self.to_device(np.take(v.numpy(), rows, axis=0)) for n, v in past.items()}

    def slice_past(self, past: Mapping[str, ort.OrtValue], length: int) -> dict[str, ort.OrtValue]:
        """``past`` cut to its first ``length`` positions (axis 2), to rewind a cache."""
        return {n: self.to_device(v.numpy()[:, :, :length]) for n, v in past.items()}
