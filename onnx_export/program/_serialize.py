"""Writing a model to disk: atomically, streamed tensor by tensor, external data when large.

Nothing here holds a second copy of the weights. External data goes through
``onnx_ir.save``, which writes one tensor at a time. A single-file model is written by
:func:`write_streamed`: the protobuf message is laid out by hand around the initializers'
bytes, which are written straight from each tensor (a live torch tensor, or a range of a
``.safetensors`` file); the bytes are exactly those of ``ModelProto.SerializeToString()``.

Every external-data location we write, and every one a model we read references, must be
a relative path inside the model's folder (:func:`check_external_location`).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_export._progress import ProgressBar

__all__ = [
    "PROTOBUF_LIMIT",
    "initializer_bytes",
    "save_model",
    "write_streamed",
    "without_data",
    "check_external_location",
    "check_external_data",
    "check_external_references",
]

#: Protobuf refuses messages of 2 GiB and more; keep a margin for the graph itself.
PROTOBUF_LIMIT = 2**31 - 2**27

# Field numbers (wire type 2, length-delimited) of the messages laid out by hand.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9

#: Below this many bytes of weights, saving shows no progress bar unless asked.
_QUIET_BELOW = 64 * 2**20


def initializer_bytes(model: ir.Model) -> int:
    """Total size of the model's weights."""
    return sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )


# -- external data locations -----------------------------------------------------------------


def check_external_location(
    location: str | os.PathLike[str], base_dir: str | os.PathLike[str]
) -> pathlib.Path:
    """The file that external-data ``location`` names, if it stays inside ``base_dir``.

    Raises:
        ValueError: ``location`` is empty, absolute, has a ``..`` part, or resolves
            (through symbolic links) outside ``base_dir``.
    """
    text = os.fspath(location)
    parts = text.replace("\\", "/").split("/")
    if not text or os.path.isabs(text) or text.startswith(("/", "\\")) or ":" in parts[0]:
        raise ValueError(
            f"External data location {text!r} is an absolute path; locations must be relative "
            "to the model's folder (e.g. external_data='model.onnx.data'), so that the model "
            "and its data can move together."
        )
    if ".." in parts:
        raise ValueError(
            f"External data location {text!r} must not leave the model's folder ('..')."
        )
    base = pathlib.Path(base_dir).resolve()
    path = (base / text).resolve()
    if not path.is_relative_to(base) or path == base:
        raise ValueError(
            f"External data location {text!r} resolves to {str(path)!r}, outside the model's "
            f"folder {str(base)!r}."
        )
    return path


def check_external_data(model: ir.Model) -> None:
    """Refuse a model whose external tensors point outside their base folders."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                check_external_location(tensor.location, tensor.base_dir)


def check_external_references(path: str | os.PathLike[str]) -> list[str]:
    """Check the external-data locations a saved ``.onnx`` file references; return them.

    Reads the file without its external data; refuses (``ValueError``) any location that
    is absolute or leaves the file's folder. Call it before handing a model from an
    untrusted source to a runtime.
    """
    proto = onnx.load(os.fspath(path), load_external_data=False)
    base = pathlib.Path(path).absolute().parent
    locations: list[str] = []
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        check_external_location(location, base)
        if location not in locations:
            locations.append(location)
    return locations


# -- streaming a single-file model -------------------------------------------------------------


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    number = shift = 0
    while True:
        byte = data[at]
        number |= (byte & 0x7F) << shift
        at += 1
        shift += 7
        if not byte & 0x80:
            return number, at


def _split_after(data: bytes, field: int) -> tuple[bytes, bytes]:
    """Split a serialized message before its first field numbered above ``field``.

    Protobuf serializes known fields in field-number order, so the two halves are the
    fields up to ``field`` and those after it.
    """
    at = 0
    while at < len(data):
        start = at
        key, at = _read_varint(data, at)
        if key >> 3 > field:
            return data[:start], data[start:]
        wire = key & 7
        if wire == 0:
            _, at = _read_varint(data, at)
        elif wire == 1:
            at += 8
        elif wire == 2:
            length, at = _read_varint(data, at)
            at += length
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"Unexpected protobuf wire type {wire}.")
    return data, b""


def _tag(field: int) -> bytes:
    return _varint(field << 3 | 2)


def _empty() -> ir.TensorProtocol:
    return ir.Tensor(np.empty(0, dtype=np.uint8))


@contextlib.contextmanager
def without_data(values: Sequence[ir.Value]) -> Iterator[None]:
    """Give ``values`` data-less stand-ins (same name, dtype, shape) for the block."""
    tensors = [v.const_value for v in values]
    try:
        for value, tensor in zip(values, tensors, strict=True):
            assert tensor is not None
            value.const_value = ir.LazyTensor(
                _empty,
                dtype=tensor.dtype,
                shape=ir.Shape(list(tensor.shape.numpy())),
                name=value.name,
                doc_string=tensor.doc_string,
                metadata_props=dict(tensor.metadata_props),
            )
        yield
    finally:
        for value, tensor in zip(values, tensors, strict=True):
            value.const_value = tensor


def _write_tensor(tensor: ir.TensorProtocol, file: IO[bytes]) -> None:
    start = file.tell()
    tofile = getattr(tensor, "tofile", None)
    if tofile is not None:
        tofile(file)
    else:
        file.write(tensor.tobytes())
    written = file.tell() - start
    if written != tensor.nbytes:
        raise ValueError(
            f"Tensor {tensor.name!r} wrote {written} bytes; its dtype and shape say "
            f"{tensor.nbytes}."
        )


_Entry = tuple[bytes, ir.TensorProtocol | None, bytes]  # bytes before the data, data, after


def _pieces(model: ir.Model) -> tuple[bytes, bytes, list[_Entry], bytes, bytes]:
    """The serialized model around its initializers' data.

    Returns:
        The model's fields before ``graph``, the graph's fields before ``initializer``,
        each initializer (with its data to stream, or ``None`` when inline), the graph's
        fields after ``initializer`` and the model's after ``graph``.
    """
    values = [
        v
        for v in model.graph.initializers.values()
        if v.const_value is not None and not isinstance(v.const_value, ir.StringTensor)
    ]
    streamed = {id(v) for v in values}
    with without_data(values):
        proto = ir.serde.serialize_model(model)
    entries: list[_Entry] = []
    initialized = [v for v in model.graph.initializers.values() if v.const_value is not None]
    for entry, value in zip(proto.graph.initializer, initialized, strict=True):
        if id(value) not in streamed:
            entries.append((entry.SerializeToString(), None, b""))
            continue
        entry.ClearField("raw_data")
        head, tail = _split_after(entry.SerializeToString(), _TENSOR_RAW_DATA)
        entries.append((head, value.const_value, tail))
    del proto.graph.initializer[:]
    graph_head, graph_tail = _split_after(proto.graph.SerializeToString(), _GRAPH_INITIALIZER)
    proto.ClearField("graph")
    model_head, model_tail = _split_after(proto.SerializeToString(), _MODEL_GRAPH)
    return model_head, graph_head, entries, graph_tail, model_tail


def _entry_size(head: bytes, tensor: ir.TensorProtocol | None, tail: bytes) -> int:
    if tensor is None:
        return len(head)
    n = tensor.nbytes
    return len(head) + len(_tag(_TENSOR_RAW_DATA)) + len(_varint(n)) + n + len(tail)


def write_streamed(
    model: ir.Model,
    path: str | os.PathLike[str],
    *,
    on_tensor: Callable[[ir.TensorProtocol], None] | None = None,
) -> None:
    """Write ``model`` as one ``.onnx`` file, copying each weight's bytes from its source.

    The main graph's initializers are written one at a time, straight from their tensors;
    the rest of the model is serialized without them. The file is byte-identical to
    ``onnx.save(ir.serde.serialize_model(model))``.
    """
    model_head, graph_head, entries, graph_tail, model_tail = _pieces(model)
    sizes = [_entry_size(*entry) for entry in entries]
    graph_size = len(graph_head) + len(graph_tail)
    graph_size += sum(len(_tag(_GRAPH_INITIALIZER)) + len(_varint(s)) + s for s in sizes)
    with open(path, "wb") as file:
        file.write(model_head + _tag(_MODEL_GRAPH) + _varint(graph_size) + graph_head)
        for (head, tensor, tail), size in zip(entries, sizes, strict=True):
            file.write(_tag(_GRAPH_INITIALIZER) + _varint(size) + head)
            if tensor is not None:
                file.write(_tag(_TENSOR_RAW_DATA) + _varint(tensor.nbytes))
                _write_tensor(tensor, file)
                file.write(tail)
                if on_tensor is not None:
                    on_tensor(tensor)
        file.write(graph_tail + model_tail)


# -- saving ------------------------------------------------------------------------------------


def _fsync(path: pathlib.Path) -> None:
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _data_location(target: pathlib.Path, external_data: bool | str | None, size: int) -> str | None:
    if isinstance(external_data, str):
        location = external_data
    elif external_data or (external_data is None and size > PROTOBUF_LIMIT):
        location = f"{target.name}.data"
    else:
        if size > PROTOBUF_LIMIT:
            raise ValueError(
                f"The weights take {size / 2**30:.2f} GB, over protobuf's 2 GB limit for one "
                "file; save with external_data=True (or leave it None)."
            )
        return None
    path = check_external_location(location, target.parent)
    if path == target:
        raise ValueError(f"External data location {location!r} is the model file itself.")
    return location


def _progress_callback(bar: ProgressBar) -> Callable[[ir.TensorProtocol, Any], None]:
    def callback(tensor: ir.TensorProtocol, _info: Any) -> None:
        bar.advance(tensor.nbytes, detail=str(tensor.name or ""))

    return callback


def save_model(
    model: ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: bool | str | None = None,
    progress: bool | None = None,
) -> tuple[pathlib.Path, pathlib.Path | None]:
    """Write ``model`` to ``path`` (and its weights to an external-data file if asked).

    Args:
        model: The model; its weights are read one tensor at a time.
        path: The ``.onnx`` file.
        external_data: ``True`` for ``<name>.data`` beside the model, a relative file
            name for another, ``False`` for one file; ``None`` picks external data only
            past protobuf's 2 GB limit.
        progress: Draw a progress bar (by bytes) on stderr; ``None``: only on a terminal
            and for weights of 64 MB or more.

    Returns:
        The model's path and the external-data file's (or ``None``).

    The files are written in a temporary folder beside the destination and moved into
    place only when complete, so a failure leaves any earlier file intact. Once the new
    model is in place, the external-data files that the earlier model at ``path``
    referenced and the new one does not are deleted; no other file is touched.
    """
    target = pathlib.Path(path).absolute()
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    check_external_data(model)
    size = initializer_bytes(model)
    location = _data_location(target, external_data, size)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        if progress is None and size < _QUIET_BELOW:
            progress = False  # a bar that flashes by only clutters the terminal
        with ProgressBar("Saving weights", size, unit="B", enabled=progress) as bar:
            if location is None:
                write_streamed(
                    model, staging / target.name, on_tensor=lambda t: bar.advance(t.nbytes)
                )
            else:
                (staging / location).parent.mkdir(parents=True, exist_ok=True)
                ir.save(
                    model,
                    staging / target.name,
                    external_data=location,
                    callback=_progress_callback(bar),
                )
        previous = _previous_data_files(target)
        data_path = None
        if location is not None and (staging / location).stat().st_size == 0:
            location = None  # every weight is small enough to stay inline: no empty file
        if location is not None:
            _fsync(staging / location)
            data_path = target.parent / location
            data_path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / location, data_path)
        _fsync(staging / target.name)
        os.replace(staging / target.name, target)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    _remove_stale(previous, keep=(target, data_path))
    return target, data_path


def _previous_data_files(target: pathlib.Path) -> list[pathlib.Path]:
    """The external-data files that the model now at ``target`` references.

    Only files inside the model's folder count (:func:`check_external_location`); a file
    that is not an ONNX model, or references a location outside, gives none. The file is
    parsed only when its bytes hold a ``location`` key: a single-file model costs one scan.
    """
    try:
        if not target.is_file() or not 0 < target.stat().st_size < PROTOBUF_LIMIT:
            return []
        with (
            open(target, "rb") as file,
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            if data.find(_LOCATION_KEY) < 0:
                files: list[pathlib.Path] = []
            else:
                files = [target.parent / loc for loc in check_external_references(target)]
    except Exception:  # not ONNX, unreadable, or a location we refuse: leave it all alone
        return []
    default = target.with_name(f"{target.name}.data")
    if default not in files and default.is_file() and default.stat().st_size == 0:
        files.append(default)  # the empty file earlier versions wrote for small weights
    return files


#: How ``TensorProto.external_data`` spells its ``location`` entry's key (field 1, 8 bytes).
_LOCATION_KEY = b"\x0a\x08location"


def _remove_stale(files: Sequence[pathlib.Path], keep: Sequence[pathlib.Path | None]) -> None:
    """Delete the previous version's data files that the new version does not use."""
    kept = {os.path.normcase(os.path.abspath(path)) for path in keep if path is not None}
    for path in files:
        if os.path.normcase(os.path.abspath(path)) not in kept:
            with contextlib.suppress(OSError):
                path.unlink()
