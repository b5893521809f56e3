"""What Triton needs to know of a saved model: its tensors, their types, the batch rule.

Read from the graph (without its weights) and from the adapter spec in ``metadata_props``;
nothing is run.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from ._errors import RepositoryError

__all__ = ["ServedTensor", "ServedModel", "read_served_model", "TRITON_TYPES", "WIRE_TYPES"]

#: ONNX element type name -> (numpy dtype name, Triton config type).
_ONNX_TYPES: dict[str, tuple[str, str]] = {
    "BOOL": ("bool", "TYPE_BOOL"),
    "UINT8": ("uint8", "TYPE_UINT8"),
    "UINT16": ("uint16", "TYPE_UINT16"),
    "UINT32": ("uint32", "TYPE_UINT32"),
    "UINT64": ("uint64", "TYPE_UINT64"),
    "INT8": ("int8", "TYPE_INT8"),
    "INT16": ("int16", "TYPE_INT16"),
    "INT32": ("int32", "TYPE_INT32"),
    "INT64": ("int64", "TYPE_INT64"),
    "FLOAT16": ("float16", "TYPE_FP16"),
    "FLOAT": ("float32", "TYPE_FP32"),
    "DOUBLE": ("float64", "TYPE_FP64"),
    "BFLOAT16": ("bfloat16", "TYPE_BF16"),
    "STRING": ("object", "TYPE_STRING"),
}
#: numpy dtype name -> Triton config type.
TRITON_TYPES: dict[str, str] = dict(_ONNX_TYPES.values())
#: numpy dtype name -> the datatype of the KServe v2 protocol (what a request carries).
WIRE_TYPES: dict[str, str] = {
    name: kind.removeprefix("TYPE_").replace("STRING", "BYTES")
    for name, kind in TRITON_TYPES.items()
}
_METADATA_KEY = "onnx_export.adapter_spec"
_CACHE_PREFIXES = ("past_key_values", "past.", "past_")


@dataclasses.dataclass(frozen=True)
class ServedTensor:
    """One graph input or output as Triton sees it.

    Attributes:
        name: The graph's name for it (Triton's ``name``).
        dtype: numpy dtype name (``"float32"``).
        shape: One entry per axis: an int for a static size, a str for a named dynamic
            one, ``None`` for an axis the graph leaves unnamed.
    """

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]

    @property
    def triton_type(self) -> str:
        """The ``TYPE_*`` of ``config.pbtxt`` (``"TYPE_FP32"``)."""
        return TRITON_TYPES[self.dtype]


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """A saved model, read for serving.

    Attributes:
        path: The ``.onnx`` file.
        inputs: The graph inputs, in order.
        outputs: The graph outputs, in order.
        adapter_spec: The adapter spec's JSON text, or ``None`` for a model saved without one.
        external_files: Files the weights live in, beside the model (relative names).
        batch_axis: The name of the dynamic axis that is the first axis of every input and
            output (and appears nowhere else), or ``None``: then Triton cannot batch it.
    """

    path: pathlib.Path
    inputs: tuple[ServedTensor, ...]
    outputs: tuple[ServedTensor, ...]
    adapter_spec: str | None
    external_files: tuple[str, ...]
    batch_axis: str | None


def read_served_model(path: pathlib.Path) -> ServedModel:
    """Read ``path`` (a saved ``.onnx``) for serving; weights are not loaded.

    Raises:
        RepositoryError: No such file, not an ONNX model, a type Triton cannot carry, or a
            decoder with a key/value cache.
    """
    model = _load(path)
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = tuple(_tensor(v, path) for v in graph.input if v.name not in initializers)
    outputs = tuple(_tensor(v, path) for v in graph.output)
    _refuse_cache(path, inputs)
    spec = next((p.value for p in model.metadata_props if p.key == _METADATA_KEY), None)
    return ServedModel(
        path=path,
        inputs=inputs,
        outputs=outputs,
        adapter_spec=spec,
        external_files=_external_files(graph),
        batch_axis=_batch_axis(inputs + outputs),
    )


def _load(path: pathlib.Path) -> Any:
    import onnx

    if not path.is_file():
        raise RepositoryError(
            f"expected a saved .onnx file, got {path}, which "
            + ("is a folder without onnx_export.json" if path.is_dir() else "does not exist")
            + ". Pass the file ONNXProgram.save wrote, or a folder `onnx-export hf` wrote."
        )
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf's DecodeError, OSError, onnx's own errors
        raise RepositoryError(f"{path} is not a readable ONNX model: {e}") from e
    if not model.graph.output:
        raise RepositoryError(
            f"{path} is not an ONNX model with outputs (it parses as an empty message). "
            "Check that it is the .onnx file that was saved."
        )
    return model


def _tensor(value: Any, path: pathlib.Path) -> ServedTensor:
    import onnx

    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise RepositoryError(
            f"{path}: graph value {value.name!r} is a {kind}, Triton carries tensors only. "
            "Export the model with tensor inputs and outputs (lists become one tensor each)."
        )
    tensor = value.type.tensor_type
    onnx_name = onnx.TensorProto.DataType.Name(tensor.elem_type)
    if onnx_name not in _ONNX_TYPES:
        raise RepositoryError(
            f"{path}: {value.name!r} has element type {onnx_name}, for which Triton has no "
            f"TYPE_*; expected one of {', '.join(_ONNX_TYPES)}. Cast it in the model."
        )
    if not tensor.HasField("shape"):
        raise RepositoryError(
            f"{path}: {value.name!r} has no shape (not even its rank); Triton needs the "
            "rank. Export again, or give the graph its shapes (onnx.shape_inference)."
        )
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
    )
    return ServedTensor(value.name, _ONNX_TYPES[onnx_name][0], shape)


class CacheNotServable(RepositoryError):
    """A decoder step with a key/value cache: Triton cannot hold its growing state."""


def _refuse_cache(path: pathlib.Path, inputs: tuple[ServedTensor, ...]) -> None:
    cache = [t.name for t in inputs if t.name.startswith(_CACHE_PREFIXES)]
    if cache:
        genai = path.parent / "genai_config.json"
        runtimes = "onnx_export.hf.OrtModelForCausalLM" + (
            f", onnxruntime-genai ({genai.name} beside it)" if genai.is_file() else ""
        )
        raise CacheNotServable(
            f"{path} is a decoder step with a key/value cache ({cache[0]}, ... : "
            f"{len(cache)} inputs) whose length grows with every token. Triton's sequence "
            "batcher keeps implicit state of one shape per sequence and batches sequences "
            "only when their states have equal shapes, so it cannot hold this cache. Serve "
            f"text generation with {runtimes}, `onnx-export serve FOLDER --openai` (an "
            "OpenAI-compatible server) or a generation server (Triton's TensorRT-LLM or vLLM "
            "backend); serve a graph without a cache (`onnx-export hf --task "
            "feature-extraction`) through Triton."
        )


def _external_files(graph: Any) -> tuple[str, ...]:
    import onnx

    names: dict[str, None] = {}
    for tensor in graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            entries = {entry.key: entry.value for entry in tensor.external_data}
            if "location" in entries:
                names.setdefault(entries["location"], None)
    return tuple(names)


def _batch_axis(tensors: tuple[ServedTensor, ...]) -> str | None:
    firsts = {t.shape[0] if t.shape else None for t in tensors}
    if len(firsts) != 1:
        return None
    (axis,) = firsts
    if not isinstance(axis, str):
        return None
    if any(axis in t.shape[1:] for t in tensors):
        return None
    return axis
