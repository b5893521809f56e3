"""One ONNX Runtime session run step after step, its cache kept as ORT values.

On CUDA, inputs and outputs go through one reused IOBinding: the presents stay on the
device and are bound as the next step's pasts without a copy. On the CPU one
``run_with_ort_values`` call does the same work with less Python. Either way no step
converts the cache to numpy, and the values are onnxruntime's C ``OrtValue``s (no Python
wrapper built per output). A ``StepSession`` is not meant to be run from two threads at once.

A decoder marked ``onnx_export.past_present_share_buffer`` (``shares_buffer``) can also
run over one preallocated cache that GQA updates in place
(``hf/runtime/generation/_shared_cache.py``);
:class:`DecodeSession` is what the decoding loop needs of either.
"""

from __future__ import annotations

import copy
import ctypes
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnxruntime.capi import _pybind_state as _C

from onnx_export.adapters._session_checks import open_session, resolve_providers
from onnx_export.hf._errors import CheckpointError, CudaGraphError
from onnx_export.hf.runtime._cache_ops import CacheOps

__all__ = [
    "DecodeSession",
    "host_float32",
    "StepSession",
    "PAST_PREFIX",
    "PRESENT_PREFIX",
    "PADDING_SIDE_KEY",
    "SHARE_BUFFER_KEY",
]

PAST_PREFIX = "past_key_values."
PRESENT_PREFIX = "present."
#: The export's model metadata key: ``"1"`` when each past can share its present's buffer
#: (the same key as ``passes/ort_gqa.py``'s, which the runtime does not import).
SHARE_BUFFER_KEY = "onnx_export.past_present_share_buffer"
#: The inputs the export found nothing reads, comma-separated (``passes/ort_gqa.py``'s key).
UNREAD_INPUTS_KEY = "onnx_export.unread_inputs"
#: ``"right"`` when the graph takes rows of different lengths as GQA does (each row's tokens
#: first, the attention mask counting them), not left-padded (the fused decoder's export).
PADDING_SIDE_KEY = "onnx_export.padding_side"

#: A value a step returns: onnxruntime's C ``OrtValue`` (``.numpy()``, fed back as is).
Value = Any

ONNX_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16


def host_float32(value: Value) -> npt.NDArray[Any]:
    """A host ``OrtValue`` as numpy; bfloat16 (which numpy lacks) widened to float32, exactly.

    A bfloat16 is the upper half of a float32's bits, so the widening is a shift.
    """
    if value.data_type() != "tensor(bfloat16)":
        return np.asarray(value.numpy())
    shape = list(value.shape())
    count = int(np.prod(shape)) if shape else 1
    raw = memoryview((ctypes.c_uint16 * count).from_address(value.data_ptr())).cast("B")
    bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
    widened: npt.NDArray[Any] = bits.view(np.float32).reshape(shape)
    return widened


class DecodeSession(Protocol):
    """What a decoding loop runs each step: a :class:`StepSession` or a shared cache."""

    def empty_past(self, batch: int) -> dict[str, Value]:
        """The first step's past inputs."""

    def run(
        self, feed: Mapping[str, Any], outputs: Sequence[str] | None = None
    ) -> dict[str, Value]:
        """One step."""

    def next_past(self, results: Mapping[str, Value]) -> dict[str, Value]:
        """The next step's past inputs, from a step's results."""

    def last_logits(self, results: Mapping[str, Value]) -> npt.NDArray[np.float32]:
        """The logits of each row's last position (batch, vocab)."""


class StepSession:
    """An ``InferenceSession`` with the names of its cache inputs and outputs.

    Attributes:
        session: The onnxruntime session.
        device: ``"cuda"`` when the CUDA provider runs it, else ``"cpu"``.
        input_names: The graph's input names.
        past_names: ``past_key_values.*`` inputs, in graph order.
        present_names: The ``present.*`` output feeding each past input.
        shares_buffer: Each past can be bound to its present's buffer (a fused decoder
            on the CPU, see ``hf/runtime/generation/_shared_cache.py``).
        pads_right: Rows of different lengths go in with their tokens first and the
            mask counting them (GQA's convention), not left-padded.
        run_options: The ``RunOptions`` every run uses.
        cpu_device: onnxruntime's CPU device, for bindings.
        fixed_inputs: Inputs fed to every run besides the step's own (a LoRA adapter's
            factors, see ``hf/runtime/generation/_adapters.py``); empty by default.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
        upcast: Sequence[str] = (),
        cuda_graph: bool = False,
    ) -> None:
        if not pathlib.Path(path).is_file():
            raise CheckpointError(f"{os.fspath(path)!r} is missing from the exported folder.")
        resolved: list[Any] = resolve_providers(
            providers, ort.get_available_providers(), ort.get_all_providers()
        )
        if cuda_graph:
            resolved = _with_cuda_graph(resolved)
        if session_options is None:  # errors only: ORT warns at load about the fused
            session_options = ort.SessionOptions()  # decoder's num_logits_to_keep, an
            session_options.log_severity_level = 3  # input with a default (on purpose)
        # MissingKernelError (bfloat16 on the CPU) names upcast=["bfloat16"] as a way out
        self.session = open_session(ort, path, session_options, resolved, list(upcast))
        self.device = "cuda" if "CUDAExecutionProvider" in self.session.get_providers() else "cpu"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._inputs = {i.name: i for i in self.session.get_inputs()}
        self.past_names = [n for n in self.input_names if n.startswith(PAST_PREFIX)]
        self.present_names = [PRESENT_PREFIX + n[len(PAST_PREFIX) :] for n in self.past_names]
        self._device = _C.OrtDevice(
            _C.OrtDevice.cuda() if self.device == "cuda" else _C.OrtDevice.cpu(),
            _C.OrtDevice.default_memory(),
            0,
        )
        self.ort_device = self._device
        self._cpu = self.cpu_device = _C.OrtDevice(
            _C.OrtDevice.cpu(), _C.OrtDevice.default_memory(), 0
        )
        self._binding = _C.SessionIOBinding(self.session._sess)
        #: Beam reordering and rewinds, on the cache's device (numpy on the CPU).
        self.cache_ops = CacheOps(self.session.get_providers(), self._device, self.device == "cpu")
        self._run_options = self.run_options = _C.RunOptions()
        self.run_options.log_severity_level = 4  # a failing run raises; no raw log line too
        self._outputs = {o.name: o for o in self.session.get_outputs()}
        self.fixed_inputs: dict[str, Value] = {}
        metadata = self.session.get_modelmeta().custom_metadata_map
        #: Inputs the graph never reads: fed once, not refreshed each step.
        self.unread_inputs = frozenset(filter(None, metadata.get(UNREAD_INPUTS_KEY, "").split(",")))
        #: Rows of different lengths go in right-aligned (tokens first), not left-padded.
        self.pads_right = metadata.get(PADDING_SIDE_KEY) == "right"
        #: Each past can share its present's buffer, of a capacity fixed before the first step.
        self.fixed_cache = metadata.get(SHARE_BUFFER_KEY) == "1" and self._static_cache_shapes()
        self.shares_buffer = (
            self.device == "cpu"
            and self.fixed_cache
            and all(self._inputs[n].type in ONNX_TO_NUMPY for n in self.past_names)
        )
        #: The decode steps are recorded and replayed as a CUDA graph (``_static_cache.py``).
        self.cuda_graph = cuda_graph
        if cuda_graph:
            self._check_cuda_graph(path)
        missing = [n for n in self.present_names if n not in self.output_names]
        if missing:
            raise CheckpointError(
                f"{os.fspath(path)!r} has past inputs without matching outputs {missing}: "
                "it was not exported by onnx_export.hf.export_pretrained."
            )

    def with_inputs(self, fixed: Mapping[str, Value]) -> StepSession:
        """This session (the same onnxruntime session) feeding ``fixed`` to every run.

        A shallow copy: both run on one ``InferenceSession``, each with its own fixed inputs
        (one LoRA adapter each), so several can be used one after another.
        """
        view = copy.copy(self)
        view.fixed_inputs = dict(fixed)
        return view

    def _check_cuda_graph(self, path: str | os.PathLike[str]) -> None:
        if self.device != "cuda":
            raise CudaGraphError(
                "CUDA graphs need the CUDA provider, and this session runs on "
                f"{self.session.get_providers()}: install onnxruntime-gpu on a machine with "
                "an NVIDIA GPU and pass providers=['cuda'], or drop cuda_graph=True."
            )
        if not self.fixed_cache:
            raise CudaGraphError(
                f"CUDA graphs need a decoder whose cache lives in one fixed buffer, and "
                f"{os.fspath(path)!r} is not one: export it with `onnx-export hf ... "
                "--target onnxruntime` (GroupQueryAttention, past_present_share_buffer), or "
                "drop cuda_graph=True."
            )

    def host_logits(self, value: Value) -> npt.NDArray[np.float32]:
        """Each row's last logits (batch, vocab) from a ``logits`` value on any device."""
        if self.device == "cpu":
            return np.ascontiguousarray(host_float32(value)[:, -1, :], dtype=np.float32)
        return np.ascontiguousarray(self.cache_ops.to_host_float32(value)[:, -1, :])

    def _static_cache_shapes(self) -> bool:
        """Pasts with static heads and head size, ``logits`` (batch, 1, static vocab)."""
        logits = self._outputs.get("logits")
        if not self.past_names or logits is None or len(logits.shape) != 3:
            return False
        dims = [logits.shape[1], logits.shape[2]]
        for name in self.past_names:
            shape = self._inputs[name].shape
            dims += [shape[1], shape[3]] if len(shape) == 4 else [None]
        return logits.shape[1] == 1 and all(isinstance(d, int) for d in dims)

    def input_meta(self, name: str) -> Any:
        """The ``NodeArg`` (onnxruntime's) of the input ``name`` (``.shape``, ``.type``)."""
        return self._inputs[name]

    def input_dtype(self, name: str) -> Any:
        """The numpy dtype of the input ``name`` (float16 for a half-precision export)."""
        return ONNX_TO_NUMPY.get(self._inputs[name].type, np.float32)

    def output_meta(self, name: str) -> Any:
        """The ``NodeArg`` (onnxruntime's) of the output ``name`` (``.shape``, ``.type``)."""
        return self._outputs[name]

    def empty_past(self, batch: int) -> dict[str, Value]:
        """Past keys and values of length 0 for a batch of ``batch``."""
        feed = {}
        for name in self.past_names:
            meta = self._inputs[name]
            shape = [batch, *(d if isinstance(d, int) else 0 for d in meta.shape[1:])]
            if meta.type == "tensor(bfloat16)":  # numpy has no bfloat16: by ONNX element type
                feed[name] = ort.OrtValue.ortvalue_from_shape_and_type(
                    shape, _BFLOAT16, self.device, 0
                )
                continue
            dtype = ONNX_TO_NUMPY.get(meta.type, np.float32)
            feed[name] = self.to_device(np.zeros(shape, dtype=dtype))
        return feed

    def to_device(self, array: npt.NDArray[Any]) -> ort.OrtValue:
        """``array`` as an ``OrtValue`` on the session's device."""
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)

    def run(
        self,
        feed: Mapping[str, npt.NDArray[Any] | ort.OrtValue | Value],
        outputs: Sequence[str] | None = None,
    ) -> dict[str, Value]:
        """Run one step; the outputs (all by default) stay ORT values on the device.

        ``logits`` is the exception: it goes to the CPU, where the next token is chosen.
        The values returned have ``.numpy()`` and can be fed to the next ``run`` as they
        are (onnxruntime's C values: no Python wrapper is built for each, which was most of
        the loop's own time).
        """
        if self.fixed_inputs:
            feed = {**self.fixed_inputs, **feed}
        if self.device == "cpu":
            return self._run_on_cpu(feed, list(outputs or self.output_names))
        binding = self._binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        c_value = _C.OrtValue
        for name, value in feed.items():
            if type(value) is c_value:
                binding.bind_ortvalue_input(name, value)
            elif isinstance(value, ort.OrtValue):
                binding.bind_ortvalue_input(name, value._ortvalue)
            elif name in self._inputs:
                binding.bind_input(name, np.ascontiguousarray(value))
            else:  # an initializer input (num_logits_to_keep): ORT has no input meta for it
                array = np.ascontiguousarray(value)
                binding.bind_ortvalue_input(name, c_value.ortvalue_from_numpy(array, self._cpu))
        names = list(outputs or self.output_names)
        for name in names:
            binding.bind_output(name, self._cpu if name == "logits" else self._device)
        self.session._sess.run_with_iobinding(binding, self._run_options)
        values = binding.get_outputs()
        return {name: values[i] for i, name in enumerate(names)}

    def _run_on_cpu(
        self, feed: Mapping[str, npt.NDArray[Any] | ort.OrtValue | Value], names: list[str]
    ) -> dict[str, Value]:
        """On the CPU one ``run_with_ort_values`` call does what the binding does, cheaper.

        The numpy inputs are wrapped without a copy (kept alive in ``arrays`` for the run);
        the presents come back as ORT values and are fed back as they are.
        """
        c_value, values, arrays = _C.OrtValue, {}, []
        for name, value in feed.items():
            if type(value) is c_value:
                values[name] = value
            elif isinstance(value, ort.OrtValue):
                values[name] = value._ortvalue
            else:
                arrays.append(np.ascontiguousarray(value))
                values[name] = c_value.ortvalue_from_numpy(arrays[-1], self._cpu)
        out = self.session._sess.run_with_ort_values(values, names, self._run_options)
        return {name: out[i] for i, name in enumerate(names)}

    def next_past(self, results: Mapping[str, Value]) -> dict[str, Value]:
        """The presents of a step, renamed as the next step's pasts."""
        return {p: results[q] for p, q in zip(self.past_names, self.present_names, strict=True)}

    def last_logits(self, results: Mapping[str, Value]) -> npt.NDArray[np.float32]:
        """The logits of each row's last position (batch, vocab), float32, the caller's own."""
        return np.ascontiguousarray(host_float32(results["logits"])[:, -1, :], dtype=np.float32)

    def reorder(self, past: Mapping[str, Value], rows: npt.NDArray[np.int64]) -> dict[str, Value]:
        """``past`` with its batch rows taken in the order ``rows`` (beam search).

        The values stay on their device (see ``_cache_ops.py``); bfloat16 works too.
        """
        if np.array_equal(rows, np.arange(len(rows))):
            return dict(past)
        return {n: self.cache_ops.take_rows(v, rows) for n, v in past.items()}

    def slice_past(self, past: Mapping[str, Value], length: int) -> dict[str, Value]:
        """``past`` cut to its first ``length`` positions (axis 2), to rewind a cache."""
        return {n: self.cache_ops.first_positions(v, length) for n, v in past.items()}


def _with_cuda_graph(providers: list[Any]) -> list[Any]:
    """``providers`` with ORT's ``enable_cuda_graph`` option on the CUDA provider."""
    cuda = "CUDAExecutionProvider"
    return [(cuda, {"enable_cuda_graph": "1"}) if p == cuda else p for p in providers]
