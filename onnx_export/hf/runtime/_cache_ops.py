"""Taking a cache's rows (beam search) and cutting its positions (a rewind) where it lives.

On the CPU numpy does it: the values are host memory, and ``np.take`` or a slice costs
less than an ONNX Runtime run. bfloat16, which numpy lacks, is taken as its 16-bit patterns
(``uint16``) and wrapped back as bfloat16: a row or a slice moves bits, no arithmetic. On a
device (CUDA) the values never come to the host: a one-node ONNX Runtime session on the
same provider (``Gather`` along the batch, ``Slice`` along the positions) reads the bound
value and writes its output on the device. Those sessions are made on first use, one per
op and element type, from model bytes written here (the runtime does not import ``onnx``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnxruntime.capi import _pybind_state as _C

__all__ = ["CacheOps", "host_bits"]

#: ONNX element types by ORT's type string (the cache's dtypes).
ELEMENT_TYPES = {
    "tensor(float)": 1,
    "tensor(float16)": 10,
    "tensor(bfloat16)": 16,
    "tensor(double)": 11,
    "tensor(int64)": 7,
    "tensor(int32)": 6,
}
_BFLOAT16 = 16
_INT64 = 7
_FLOAT = 1


def host_bits(value: Any) -> npt.NDArray[Any]:
    """A host ``OrtValue``'s memory as numpy, bfloat16 as ``uint16`` bit patterns (no copy)."""
    if value.data_type() != "tensor(bfloat16)":
        return np.asarray(value.numpy())
    shape = list(value.shape())
    count = int(np.prod(shape)) if shape else 1
    raw = memoryview((ctypes.c_uint16 * count).from_address(value.data_ptr())).cast("B")
    bits: npt.NDArray[Any] = np.frombuffer(raw, dtype=np.uint16).reshape(shape)
    return bits


def _from_host(array: npt.NDArray[Any], element_type: int) -> ort.OrtValue:
    """``array`` as an ``OrtValue`` of ``element_type`` on the CPU (it keeps ``array`` alive)."""
    array = np.ascontiguousarray(array)
    if element_type == _BFLOAT16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, _BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


# A protobuf writer just large enough for a one-node ONNX model.
def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _int(field: int, number: int) -> bytes:
    return _varint(field << 3) + _varint(number)


def _message(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, element_type: int) -> bytes:
    tensor = _int(1, element_type)  # TypeProto.Tensor.elem_type, no shape: any rank
    return _message(1, name) + _message(2, _message(1, tensor))


def one_node_model(
    op_type: str,
    inputs: Sequence[tuple[str, int]],
    element_type: int,
    attributes: Sequence[tuple[str, int]] = (),
) -> bytes:
    """An ONNX model (opset 18) of one ``op_type`` node, output ``out`` of ``element_type``.

    Example:
        >>> model = one_node_model("Gather", [("data", 1), ("indices", 7)], 1, [("axis", 0)])
        >>> ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        ...     None, {"data": np.arange(4, dtype=np.float32), "indices": np.array([3, 0])})
        [array([3., 0.], dtype=float32)]
    """
    node = b"".join(_message(1, name) for name, _ in inputs) + _message(2, "out")
    node += _message(4, op_type)
    for name, number in attributes:  # AttributeProto: name, i, type INT (2)
        node += _message(5, _message(1, name) + _int(3, number) + _int(20, 2))
    graph = _message(1, node) + _message(2, op_type.lower())
    graph += b"".join(_message(11, _value_info(name, kind)) for name, kind in inputs)
    graph += _message(12, _value_info("out", element_type))
    opset = _message(1, "") + _int(2, 18)
    return _int(1, 8) + _message(8, opset) + _message(7, graph)


class CacheOps:
    """Row selection and position cuts of cache values, on the values' own device.

    Args:
        providers: The providers of the session whose values these are.
        device: onnxruntime's ``OrtDevice`` the outputs go to.
        on_host: Use numpy (values in host memory); ``False`` runs the ONNX Runtime ops
            even on the CPU (what a device does, checked on a machine without one).
    """

    def __init__(self, providers: Sequence[str], device: Any, on_host: bool) -> None:
        self._providers, self._device, self.on_host = list(providers), device, on_host
        self._sessions: dict[tuple[str, int], Any] = {}

    def take_rows(self, value: Any, rows: npt.NDArray[np.int64]) -> Any:
        """``value`` (batch, ...) with its rows in the order ``rows``."""
        element_type = ELEMENT_TYPES[value.data_type()]
        if self.on_host:
            return _from_host(np.take(host_bits(value), rows, axis=0), element_type)
        indices = np.ascontiguousarray(rows, dtype=np.int64)
        return self._run("Gather", value, element_type, {"indices": indices})

    def first_positions(self, value: Any, length: int) -> Any:
        """``value`` (batch, heads, positions, size) cut to its first ``length`` positions."""
        element_type = ELEMENT_TYPES[value.data_type()]
        if self.on_host:
            return _from_host(host_bits(value)[:, :, :length], element_type)
        bounds = {
            "starts": np.zeros(1, np.int64),
            "ends": np.array([length], np.int64),
            "axes": np.array([2], np.int64),
        }
        return self._run("Slice", value, element_type, bounds)

    def to_host_float32(self, value: Any) -> npt.NDArray[np.float32]:
        """``value`` copied to the host as float32 (bfloat16 and float16 widened exactly)."""
        element_type = ELEMENT_TYPES[value.data_type()]
        session = self._session("Cast", element_type)
        binding = _C.SessionIOBinding(session._sess)
        binding.bind_ortvalue_input("data", value)
        binding.bind_output(
            "out", _C.OrtDevice(_C.OrtDevice.cpu(), _C.OrtDevice.default_memory(), 0)
        )
        session._sess.run_with_iobinding(binding, _C.RunOptions())
        return np.asarray(binding.get_outputs()[0].numpy())

    def _session(self, op_type: str, element_type: int) -> Any:
        key = (op_type, element_type)
        if key not in self._sessions:
            output_type = element_type
            if op_type == "Gather":
                inputs, attributes = [("data", element_type), ("indices", _INT64)], [("axis", 0)]
            elif op_type == "Slice":
                names = ("starts", "ends", "axes")
                inputs, attributes = [("data", element_type), *((n, _INT64) for n in names)], []
            else:  # Cast to float32
                inputs, attributes, output_type = [("data", element_type)], [("to", _FLOAT)], _FLOAT
            model = one_node_model(op_type, inputs, output_type, attributes)
            self._sessions[key] = ort.InferenceSession(model, providers=self._providers)
        return self._sessions[key]

    def _run(
        self, op_type: str, value: Any, element_type: int, host: dict[str, npt.NDArray[Any]]
    ) -> Any:
        session = self._session(op_type, element_type)
        binding = _C.SessionIOBinding(session._sess)
        binding.bind_ortvalue_input("data", value)
        for name, array in host.items():  # small int64 inputs: ORT copies them as needed
            binding.bind_input(name, array)
        binding.bind_output("out", self._device)
        session._sess.run_with_iobinding(binding, _C.RunOptions())
        return binding.get_outputs()[0]
