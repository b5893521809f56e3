"""Running a session through ``OrtValue`` s, for dtypes numpy's onnxruntime interface lacks.

``InferenceSession.run`` cannot take or return ``bfloat16``/float8 arrays. For models with such
inputs or outputs, inputs are wrapped with ``OrtValue.ortvalue_from_numpy_with_onnx_type`` and
outputs are copied out of their (CPU) buffers into ``ml_dtypes`` arrays. Only used when the
spec has such a dtype.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._dtypes import ONNX_ELEMENT_TYPES, numpy_dtype, onnx_value_dtype
from ._session_checks import quiet_run_options
from ._spec import TensorSpec

__all__ = ["OrtValueRunner", "needs_ortvalues"]


def needs_ortvalues(tensors: Sequence[TensorSpec]) -> bool:
    """Whether any tensor has a dtype that needs the ``OrtValue`` path.

    Example:
        >>> needs_ortvalues([TensorSpec("x", "bfloat16", ())]), needs_ortvalues([])
        (True, False)
    """
    return any(onnx_value_dtype(t.dtype) in ONNX_ELEMENT_TYPES for t in tensors)


class OrtValueRunner:
    """Runs a session with ``OrtValue`` inputs and outputs.

    Args:
        ort: The ``onnxruntime`` module.
        session: The ``InferenceSession``.
        inputs: Tensor specs of the graph inputs, in graph order.
        outputs: Tensor specs of the graph outputs, in graph order.

    Example:
        >>> runner = OrtValueRunner(None, None, [], [])  # built by OnnxModule when needed
    """

    def __init__(
        self, ort: Any, session: Any, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
    ) -> None:
        self._ort = ort
        self._session = session
        self._run_options = quiet_run_options(ort) if ort is not None else None
        self._inputs = [(t.name, ONNX_ELEMENT_TYPES.get(onnx_value_dtype(t.dtype))) for t in inputs]
        self._output_names = [t.name for t in outputs]
        self._output_dtypes = [onnx_value_dtype(t.dtype) for t in outputs]

    def run(self, arrays: Sequence[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
        """Run on numpy arrays (``ml_dtypes`` arrays for the extended dtypes).

        Raises:
            TypeError: An extended-dtype output cannot be represented (``ml_dtypes`` missing)
                or lives on a device.
        """
        make = self._ort.OrtValue
        feed = {}
        for (name, element_type), value in zip(self._inputs, arrays, strict=True):
            array = np.require(value, requirements="C")  # keeps 0-d arrays 0-d
            if element_type is None:
                feed[name] = make.ortvalue_from_numpy(array)
            else:
                bits = array.view(np.dtype(f"u{array.dtype.itemsize}"))
                feed[name] = make.ortvalue_from_numpy_with_onnx_type(bits, element_type)
        values = self._session.run_with_ort_values(self._output_names, feed, self._run_options)
        return [
            _to_numpy(value, dtype, name)
            for value, dtype, name in zip(
                values, self._output_dtypes, self._output_names, strict=True
            )
        ]


def _to_numpy(value: Any, dtype_name: str, name: str) -> np.ndarray[Any, Any]:
    if dtype_name not in ONNX_ELEMENT_TYPES:
        return np.asarray(value.numpy())
    dtype = numpy_dtype(dtype_name)
    if dtype is None:
        raise TypeError(
            f"{name}: expected an output dtype numpy can hold, got {dtype_name}. Install "
            "ml_dtypes (pip install ml_dtypes) to receive such outputs."
        )
    if value.device_name().lower() != "cpu":
        raise TypeError(
            f"{name}: expected a CPU output to copy, got one on {value.device_name()}. Pass torch "
            "CUDA tensors so that outputs stay on the device, or run on CPU."
        )
    raw = bytearray(ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()))
    return np.frombuffer(raw, dtype=dtype).reshape(value.shape())
