"""A ``.safetensors`` file read into numpy arrays, without the ``safetensors`` package.

The format is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the bytes. The torch-free runtime reads PEFT adapters
with it (the ``safetensors`` package is an export-side dependency). bfloat16, which numpy
lacks, is widened to float32 exactly (a bfloat16 is a float32's upper 16 bits).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import AdapterError

__all__ = ["read_safetensors"]

_DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,  # widened below
    "I64": np.int64,
    "I32": np.int32,
}


def _tensor(name: str, info: Any, data: memoryview, where: str) -> npt.NDArray[Any]:
    if not isinstance(info, dict) or info.get("dtype") not in _DTYPES:
        dtype = info.get("dtype") if isinstance(info, dict) else info
        raise AdapterError(
            f"{where}: tensor {name!r} has dtype {dtype!r}; this reader takes "
            f"{', '.join(_DTYPES)}. Save the adapter in float32, float16 or bfloat16."
        )
    dtype = np.dtype(_DTYPES[info["dtype"]])
    shape = [int(d) for d in info.get("shape", [])]
    start, end = (int(o) for o in info.get("data_offsets", (0, -1)))
    if not 0 <= start <= end <= len(data) or end - start != dtype.itemsize * int(np.prod(shape)):
        raise AdapterError(
            f"{where}: tensor {name!r} has byte range [{start}, {end}) for shape {shape} of "
            f"{info['dtype']} in {len(data)} bytes of data; the file is damaged, save it again."
        )
    array = np.frombuffer(data[start:end], dtype=dtype).reshape(shape)
    if info["dtype"] == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.copy()


def read_safetensors(path: str | os.PathLike[str]) -> dict[str, npt.NDArray[Any]]:
    """Every tensor of a ``.safetensors`` file, by name, as numpy arrays (bfloat16 -> float32).

    Raises:
        AdapterError: The file cannot be read, or its header or byte ranges are damaged.

    Example:
        >>> import tempfile, pathlib, struct, json
        >>> header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
        >>> file = pathlib.Path(tempfile.mkdtemp()) / "w.safetensors"
        >>> _ = file.write_bytes(struct.pack("<Q", len(header)) + header.encode()
        ...                      + struct.pack("<2f", 1.0, 2.0))
        >>> read_safetensors(file)["w"]
        array([1., 2.], dtype=float32)
    """
    where = os.fspath(path)
    try:
        raw = pathlib.Path(path).read_bytes()
    except OSError as e:
        raise AdapterError(f"{where!r} cannot be read: {e.strerror or e}.") from e
    size = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else -1
    try:
        header = json.loads(raw[8 : 8 + size]) if 0 < size <= len(raw) - 8 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise AdapterError(
            f"{where!r} is not a safetensors file (no readable header); give the "
            "adapter_model.safetensors that PEFT's save_pretrained writes."
        )
    header.pop("__metadata__", None)
    data = memoryview(raw)[8 + size :]
    return {name: _tensor(name, info, data, where) for name, info in header.items()}
