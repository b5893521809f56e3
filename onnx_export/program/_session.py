"""The export's ONNX Runtime session, built without copying the weights through protobuf.

Building a session from ``model_proto.SerializeToString()`` copies every weight three
times before ONNX Runtime holds it: into the ``ModelProto``, into the serialized bytes,
and out of them again when ONNX Runtime parses the model. Here the graph is serialized
without the data of its larger weights (marked as external data), and ONNX Runtime gets
those weights as ``OrtValue`` views of the arrays the model already holds
(``SessionOptions.add_external_initializers``), which it copies once into its own
memory. The session is the same (same graph, same weights, same optimizations); a model
whose weights cannot be handed over this way (dtypes that numpy cannot hold plainly,
such as bfloat16 or 4-bit ones) keeps them inline. Any failure of this route falls back
to the serialized bytes, whose build then gives the verdict and the error, as before.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_export.adapters import AdapterSpec, OnnxModule
from onnx_export.adapters._session_checks import quiet_session_options
from onnx_export.program._serialize import without_data

__all__ = ["open_session_module"]

_LOG = logging.getLogger(__name__)

#: Weights above this many bytes are handed over as arrays (smaller ones, such as shape
#: constants, stay in the graph: ONNX Runtime folds them while optimizing).
_HANDED_OVER_FROM = 1024

#: dtypes whose numpy arrays ONNX Runtime takes as they are.
_PLAIN = frozenset(
    np.dtype(name)
    for name in (
        "float32",
        "float64",
        "float16",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    )
)

#: The location written for the weights handed over (ONNX Runtime never reads it).
_IN_MEMORY = "onnx_export-in-memory"


def _handed_over(model: ir.Model) -> tuple[list[ir.Value], list[np.ndarray]]:
    """The main graph's larger weights in plain dtypes, and their arrays."""
    values: list[ir.Value] = []
    arrays: list[np.ndarray] = []
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or isinstance(tensor, ir.StringTensor):
            continue
        if tensor.dtype.numpy() not in _PLAIN:
            # bfloat16, float8, 4-bit: a model ONNX Runtime may refuse (no kernel), which
            # the serialized build reports; its upcast path rebuilds from those bytes.
            return [], []
        if tensor.nbytes <= _HANDED_OVER_FROM:
            continue
        array = tensor.numpy()
        if array.dtype not in _PLAIN or array.shape != tuple(tensor.shape.numpy()):
            return [], []
        values.append(value)
        arrays.append(np.ascontiguousarray(array))
    return values, arrays


def _graph_bytes(model: ir.Model, values: Sequence[ir.Value]) -> bytes:
    """The serialized model with ``values``' data marked external (not written)."""
    with without_data(values):
        proto = ir.serde.serialize_model(model)
    names = {v.name for v in values}
    for tensor in proto.graph.initializer:
        if tensor.name in names:
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            del tensor.external_data[:]
            entry = tensor.external_data.add()
            entry.key, entry.value = "location", _IN_MEMORY
    return bytes(proto.SerializeToString())


def _without_weight_copies(
    model: ir.Model, spec: AdapterSpec | None, allowed_classes: Sequence[type], ort: Any
) -> tuple[OnnxModule, list[Any]] | None:
    values, arrays = _handed_over(model)
    if not values:
        return None
    options = quiet_session_options(ort)
    handed = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays]
    options.add_external_initializers([str(v.name) for v in values], handed)
    data = _graph_bytes(model, values)
    module = OnnxModule(data, spec, allowed_classes=allowed_classes, session_options=options)
    return module, [handed, arrays]


def open_session_module(
    model: ir.Model, spec: AdapterSpec | None, allowed_classes: Sequence[type]
) -> tuple[OnnxModule, list[Any]]:
    """The model's ``OnnxModule`` on the CPU, and what its session was handed (keep it).

    Raises:
        Whatever ``OnnxModule`` raises for the serialized model (``MissingKernelError``,
        ``InvalidModelError``, ONNX Runtime's own errors): the route without weight
        copies is tried first, and on any failure the serialized model is built as the
        only verdict.
    """
    ort = importlib.import_module("onnxruntime")
    try:
        found = _without_weight_copies(model, spec, allowed_classes, ort)
    except Exception as error:  # the serialized model's build below decides (and raises)
        _LOG.debug("Building the session from the serialized model: %s", error)
        found = None
    if found is not None:
        return found
    data = ir.serde.serialize_model(model).SerializeToString()
    options = quiet_session_options(ort)
    return OnnxModule(data, spec, allowed_classes=allowed_classes, session_options=options), []
