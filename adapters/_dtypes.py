"""Dtype names shared by specs, numpy, torch and ONNX Runtime.

Specs name dtypes the numpy way (``"float32"``, ``"bool"``, ``"complex64"``, ``"bfloat16"``).
Complex tensors cross the ONNX boundary as their real view: a float tensor with a trailing
axis of 2 (``complex64`` -> ``float32``, ``complex128`` -> ``float64``).
"""

from __future__ import annotations

import importlib
import sys
from types import MappingProxyType

import numpy as np

from ._torch import torch_module

__all__ = [
    "DTYPE_NAMES",
    "ORT_TYPES",
    "REAL_OF_COMPLEX",
    "ONNX_ELEMENT_TYPES",
    "numpy_dtype",
    "torch_dtype",
    "dtype_name_of",
    "onnx_value_dtype",
]

ORT_TYPES = MappingProxyType(
    {
        "float32": "tensor(float)",
        "float64": "tensor(double)",
        "float16": "tensor(float16)",
        "bfloat16": "tensor(bfloat16)",
        "float8_e4m3fn": "tensor(float8e4m3fn)",
        "float8_e4m3fnuz": "tensor(float8e4m3fnuz)",
        "float8_e5m2": "tensor(float8e5m2)",
        "float8_e5m2fnuz": "tensor(float8e5m2fnuz)",
        "float4_e2m1fn_x2": "tensor(float4e2m1)",  # torch packs two values an element
        "int8": "tensor(int8)",
        "int16": "tensor(int16)",
        "int32": "tensor(int32)",
        "int64": "tensor(int64)",
        "uint8": "tensor(uint8)",
        "uint16": "tensor(uint16)",
        "uint32": "tensor(uint32)",
        "uint64": "tensor(uint64)",
        "bool": "tensor(bool)",
        "complex64": "tensor(complex64)",
        "complex128": "tensor(complex128)",
    }
)
"""Spec dtype name -> ONNX Runtime's type string (``NodeArg.type``)."""

DTYPE_NAMES: tuple[str, ...] = tuple(ORT_TYPES)
"""Every dtype name a spec may use."""

REAL_OF_COMPLEX = MappingProxyType({"complex64": "float32", "complex128": "float64"})
"""Complex dtype -> dtype of its real view."""

ONNX_ELEMENT_TYPES = MappingProxyType(
    {
        "bfloat16": 16,
        "float8_e4m3fn": 17,
        "float8_e4m3fnuz": 18,
        "float8_e5m2": 19,
        "float8_e5m2fnuz": 20,
    }
)
"""Dtypes numpy lacks natively -> ``onnx.TensorProto`` element type (``ml_dtypes`` holds them)."""

_EXTENDED = tuple(ONNX_ELEMENT_TYPES)


def onnx_value_dtype(name: str) -> str:
    """Return the dtype of the ONNX value that carries a tensor of dtype ``name``.

    Example:
        >>> onnx_value_dtype("complex64"), onnx_value_dtype("int64")
        ('float32', 'int64')
    """
    return REAL_OF_COMPLEX.get(name, name)


def numpy_dtype(name: str) -> np.dtype[np.generic] | None:
    """Return the numpy dtype for a spec dtype name, or ``None`` if numpy cannot hold it.

    ``bfloat16`` and the float8 types need the optional ``ml_dtypes`` package.

    Example:
        >>> numpy_dtype("float16")
        dtype('float16')
    """
    if name not in _EXTENDED:
        return np.dtype(name)
    ml_dtypes = sys.modules.get("ml_dtypes")
    if ml_dtypes is None:
        try:
            ml_dtypes = importlib.import_module("ml_dtypes")
        except ImportError:
            return None
    scalar = getattr(ml_dtypes, name, None)
    return None if scalar is None else np.dtype(scalar)


def torch_dtype(name: str) -> object | None:
    """Return ``torch.<name>`` when torch is imported, else ``None``.

    Example:
        >>> torch_dtype("float32") is None or str(torch_dtype("float32")) == "torch.float32"
        True
    """
    torch = torch_module()
    return None if torch is None else getattr(torch, name, None)


def dtype_name_of(value: object) -> str:
    """Return the spec dtype name of a numpy array or torch tensor.

    Args:
        value: An object with a ``dtype`` attribute.

    Returns:
        ``"float32"``, ``"bool"``, ... (``torch.`` prefix removed).

    Example:
        >>> dtype_name_of(np.zeros(2, dtype=np.int64))
        'int64'
    """
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype.name
    return str(dtype).removeprefix("torch.")
