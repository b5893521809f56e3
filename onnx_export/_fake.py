"""Exporting without weights: fake and meta tensors become placeholders filled at save time.

A model built under :func:`enable_fake_mode` (or on the ``meta`` device) exports like any
other; its weights become :class:`WeightPlaceholder` initializers that know their name,
dtype and shape but hold no data. ``ONNXProgram.save(path, model_state=...)`` then
attaches the real weights, one tensor at a time, from a state_dict, a ``.safetensors``
file or a folder of ``.safetensors`` shards (read straight from disk, never all at once).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake, unset_fake_temporarily
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from onnx_export._dtypes import PACKED_X2, float4_initializer, onnx_dims, to_ir_dtype

__all__ = [
    "FOLDED_FROM_KEY",
    "WEIGHT_KEY",
    "ModelState",
    "WeightPlaceholder",
    "WeightsError",
    "enable_fake_mode",
    "has_no_data",
    "is_weight",
    "open_model_state",
    "resolve_weights",
    "attached",
    "state_names",
    "weight_values",
    "missing_message",
    "placeholder_or_tensor",
    "real_tensors",
]

#: ``ir.Value.meta`` key set on initializers that are model weights (parameters and
#: persistent buffers, by their ``state_dict`` names): the optimizer never folds them, and
#: ``save(model_state=...)`` may replace them.
WEIGHT_KEY = "pkg.onnx_export.weight"

#: ``ir.Value.meta`` key of an initializer computed from weights (``fc.weight.T``, a
#: BatchNorm folded into a Conv): the tuple of the weight values it is computed from, at
#: serialization time. Those values may have left the graph; they stay replaceable by
#: name through :func:`weight_values`.
FOLDED_FROM_KEY = "pkg.onnx_export.folded_from"

_Source: TypeAlias = Mapping[str, torch.Tensor] | str | os.PathLike[str]
#: What ``ONNXProgram.save(model_state=...)`` takes: a state_dict, a ``.safetensors``
#: file, a folder of ``.safetensors`` shards, or a list of those (names must not repeat).
ModelState: TypeAlias = _Source | Sequence[_Source]

_SAFETENSORS_DTYPES = {
    "BOOL": ir.DataType.BOOL,
    "U8": ir.DataType.UINT8,
    "I8": ir.DataType.INT8,
    "U16": ir.DataType.UINT16,
    "I16": ir.DataType.INT16,
    "U32": ir.DataType.UINT32,
    "I32": ir.DataType.INT32,
    "U64": ir.DataType.UINT64,
    "I64": ir.DataType.INT64,
    "F16": ir.DataType.FLOAT16,
    "BF16": ir.DataType.BFLOAT16,
    "F32": ir.DataType.FLOAT,
    "F64": ir.DataType.DOUBLE,
    "F8_E4M3": ir.DataType.FLOAT8E4M3FN,
    "F8_E5M2": ir.DataType.FLOAT8E5M2,
}
_COMPLEX_SAFETENSORS = {"C64": ir.DataType.FLOAT, "C128": ir.DataType.DOUBLE}
_MAX_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header
_LISTED = 8  # names shown in an error before "... and N more"


class WeightsError(ValueError):
    """``model_state`` does not fit the exported model (missing, extra or mismatched)."""


@contextlib.contextmanager
def enable_fake_mode() -> Iterator[FakeTensorMode]:
    """Build a model and its example inputs without allocating their data.

    Inside the block, tensors (parameters, buffers, inputs) are ``FakeTensor``s: they
    have dtypes and shapes but no memory, so a 70B-parameter model builds in seconds and
    a few hundred MB. Export the model as usual (inside or after the block); the ONNX
    weights are placeholders until ``save(path, model_state=...)`` attaches real ones.
    Models on the ``meta`` device export the same way without this context.

    Yields:
        The ``torch._subclasses.FakeTensorMode`` in force.

    Example:
        >>> import torch, onnx_export
        >>> with onnx_export.enable_fake_mode():
        ...     model = torch.nn.Linear(4096, 4096)  # no 64 MB allocated
        ...     x = torch.randn(2, 4096)
        >>> program = onnx_export.dynamo_export(model, x)
        >>> real = torch.nn.Linear(4096, 4096)
        >>> import tempfile, pathlib
        >>> path = program.save(pathlib.Path(tempfile.mkdtemp()) / "m.onnx",
        ...                     model_state=real.state_dict())
    """
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
    with mode:
        yield mode


@contextlib.contextmanager
def real_tensors() -> Iterator[None]:
    """Suspend any fake mode in force, so that real tensors stay real in the block."""
    with unset_fake_temporarily():
        yield


def has_no_data(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a fake or meta tensor (shape and dtype only)."""
    return bool(is_fake(tensor)) or tensor.is_meta


def _data_error(name: str) -> ValueError:
    return ValueError(
        f"Weight {name!r} was exported from a fake or meta tensor and holds no data. Save "
        "the model with ONNXProgram.save(path, model_state=...) (a state_dict, a "
        ".safetensors file or a folder of them) and run the saved file with "
        "onnx_export.load(path)."
    )


class WeightPlaceholder(ir.LazyTensor):
    """An initializer with a name, dtype and shape, whose data comes at save time.

    Reading its data (``numpy()``, ``tobytes()``) raises a ``ValueError`` that says what
    to pass to ``ONNXProgram.save``.
    """

    def __init__(self, name: str, dtype: ir.DataType, shape: Sequence[int]) -> None:
        def no_data() -> ir.TensorProtocol:
            raise _data_error(name)

        super().__init__(no_data, dtype=dtype, shape=ir.Shape(list(shape)), name=name)

    def __repr__(self) -> str:
        return f"WeightPlaceholder<{self.dtype},{self.shape}>(name={self.name!r})"


def is_weight(value: ir.Value) -> bool:
    """Whether ``value`` is a model weight: kept by name, never folded, replaceable."""
    return bool(value.meta.get(WEIGHT_KEY)) or isinstance(value.const_value, WeightPlaceholder)


def weight_values(model: ir.Model) -> dict[str, ir.Value]:
    """Every weight of ``model`` by name: initializers, and the sources of folded ones."""
    weights: dict[str, ir.Value] = {}
    for graph in model.graphs():
        for value in graph.initializers.values():
            if is_weight(value) and FOLDED_FROM_KEY not in value.meta:
                weights[str(value.name)] = value
            for source in value.meta.get(FOLDED_FROM_KEY, ()):
                weights.setdefault(str(source.name), source)
    return weights


def state_names(program: ExportedProgram | None) -> tuple[set[str], set[str]]:
    """Names of the program's tensors: all of them, and those no ``state_dict`` holds.

    The second set is non-persistent buffers and lifted constants: a checkpoint of the
    model does not have them, so a fake export needs them passed explicitly.
    """
    if program is None:
        return set(), set()
    every: set[str] = set()
    transient: set[str] = set()
    for spec in program.graph_signature.input_specs:
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            continue
        target = str(spec.target)
        every.add(target)
        if spec.kind == InputKind.CONSTANT_TENSOR or (
            spec.kind == InputKind.BUFFER and not spec.persistent
        ):
            transient.add(target)
    return every, transient


# -- model_state sources -----------------------------------------------------------------


def _from_torch(name: str, tensor: Any) -> ir.TensorProtocol:
    if isinstance(tensor, np.ndarray):
        return ir.Tensor(tensor, name=name)
    if not isinstance(tensor, torch.Tensor):
        raise WeightsError(
            f"model_state[{name!r}] is a {type(tensor).__name__}, not a torch.Tensor."
        )
    if has_no_data(tensor):
        raise WeightsError(
            f"model_state[{name!r}] is a fake or meta tensor; pass the state_dict of a "
            "real model (taken outside enable_fake_mode(): inside it, even a real model's "
            "state_dict() is fake), or a .safetensors checkpoint."
        )
    tensor = tensor.detach()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.dtype in PACKED_X2:
        return float4_initializer(tensor, name)
    return TorchTensor(tensor, name=name)


def _header(path: pathlib.Path) -> tuple[dict[str, Any], int]:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightsError(f"{str(path)!r} is not a .safetensors file (too short).")
        (length,) = struct.unpack("<Q", head)
        if length > min(_MAX_HEADER, size - 8):
            raise WeightsError(f"{str(path)!r} is not a .safetensors file (bad header).")
        try:
            header = json.loads(f.read(length))
        except ValueError as e:
            raise WeightsError(f"{str(path)!r} has a malformed safetensors header: {e}") from e
    if not isinstance(header, dict):
        raise WeightsError(f"{str(path)!r} has a malformed safetensors header.")
    return header, 8 + length


def _safetensors_entry(
    path: pathlib.Path, name: str, info: Any, start: int, size: int
) -> ir.TensorProtocol:
    try:
        code, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsError(f"{str(path)!r}: malformed entry for {name!r}: {info!r}") from e
    dtype = _SAFETENSORS_DTYPES.get(code) or _COMPLEX_SAFETENSORS.get(code)
    if dtype is None:
        raise WeightsError(f"{str(path)!r}: tensor {name!r} has unsupported dtype {code}.")
    if code in _COMPLEX_SAFETENSORS:  # ONNX holds complex weights as their real view
        shape.append(2)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if end - begin != expected or start + end > size or begin < 0:
        raise WeightsError(
            f"{str(path)!r}: tensor {name!r} ({code}{shape}) has {end - begin} bytes at "
            f"[{begin}, {end}); expected {int(expected)}. The file may be truncated or corrupt."
        )
    # The bytes are already what ONNX wants (little-endian, row-major): copy them as is.
    return ir.ExternalTensor(
        path.name,
        start + begin,
        end - begin,
        dtype,
        shape=ir.Shape(shape),
        name=name,
        base_dir=str(path.parent),
    )


def _from_safetensors(path: pathlib.Path) -> dict[str, ir.TensorProtocol]:
    header, start = _header(path)
    size = path.stat().st_size
    return {
        name: _safetensors_entry(path, name, info, start, size)
        for name, info in header.items()
        if name != "__metadata__"
    }


def _from_path(source: str | os.PathLike[str]) -> dict[str, ir.TensorProtocol]:
    path = pathlib.Path(source).absolute()
    if path.is_dir():
        shards = sorted(path.glob("*.safetensors"))
        if not shards:
            raise WeightsError(f"The folder {str(path)!r} has no .safetensors files.")
        return _merge([(str(shard), _from_safetensors(shard)) for shard in shards])
    if not path.is_file():
        raise WeightsError(f"model_state {str(path)!r} does not exist.")
    return _from_safetensors(path)


def _merge(
    sources: Sequence[tuple[str, Mapping[str, ir.TensorProtocol]]],
) -> dict[str, ir.TensorProtocol]:
    merged: dict[str, ir.TensorProtocol] = {}
    origin: dict[str, str] = {}
    for label, tensors in sources:
        for name, tensor in tensors.items():
            if name in merged:
                raise WeightsError(
                    f"Tensor {name!r} is in model_state twice ({origin[name]} and {label}); "
                    "each name must come from one source."
                )
            merged[name] = tensor
            origin[name] = label
    return merged


def _source(source: Any, index: int) -> tuple[str, dict[str, ir.TensorProtocol]]:
    if isinstance(source, Mapping):
        return f"mapping #{index}", {str(k): _from_torch(str(k), v) for k, v in source.items()}
    if isinstance(source, (str, os.PathLike)):
        return repr(os.fspath(source)), _from_path(source)
    raise WeightsError(
        f"model_state must be a state_dict, a .safetensors path or a folder of them (or a "
        f"list of those), not a {type(source).__name__}."
    )


def open_model_state(model_state: ModelState) -> dict[str, ir.TensorProtocol]:
    """Name -> tensor for every tensor of ``model_state``, without reading any data.

    Live torch tensors are wrapped (not copied); safetensors entries point into their
    file and are copied from it when written.
    """
    sources = model_state if isinstance(model_state, (list, tuple)) else [model_state]
    return _merge([_source(source, i) for i, source in enumerate(sources)])


# -- attaching -----------------------------------------------------------------------------


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_LISTED])
    more = len(names) - _LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _describe(tensor: ir.TensorProtocol) -> str:
    return f"{tensor.dtype.name}{list(tensor.shape)}"


def missing_message(missing: Sequence[str], transient: set[str], given: bool) -> str:
    """What to say when the weights ``missing`` have no data at save time."""
    head = (
        f"model_state lacks {len(missing)} weight(s) of the exported model: {_listed(missing)}."
        if given
        else (
            f"This model was exported from fake or meta tensors: its {len(missing)} weight(s) "
            f"have no data ({_listed(missing)}). Pass them at save time: "
            "save(path, model_state=...) with the state_dict of a real model, a "
            ".safetensors file, or a folder of .safetensors shards."
        )
    )
    lost = [n for n in missing if n in transient]
    if lost:
        head += (
            f" {_listed(lost)} are non-persistent buffers or constants, which no state_dict "
            "or checkpoint holds: add them, e.g. model_state=[checkpoint, {name: tensor}], "
            "with the tensors from a real model's named_buffers() (build just the small "
            "modules that own them for real if the whole model is too large)."
        )
    return head


def resolve_weights(
    model: ir.Model,
    tensors: Mapping[str, ir.TensorProtocol],
    *,
    known: set[str],
    transient: set[str],
) -> dict[ir.Value, ir.TensorProtocol]:
    """Match ``tensors`` to the model's weights by name; every problem in one error.

    Args:
        model: The exported model.
        tensors: From :func:`open_model_state`.
        known: Every tensor name of the exported program (some may have been optimized
            away; they are accepted and ignored).
        transient: Names no ``state_dict`` holds (for the error message).

    Returns:
        The data for each weight value to attach.

    Raises:
        WeightsError: Names missing, unknown, or with another dtype or shape.
    """
    weights = weight_values(model)
    missing = [
        name
        for name, v in weights.items()
        if isinstance(v.const_value, WeightPlaceholder) and name not in tensors
    ]
    extra = [name for name in tensors if name not in weights and name not in known]
    mismatched = []
    for name, tensor in tensors.items():
        value = weights.get(name)
        if value is None or value.const_value is None:
            continue
        want = value.const_value
        if want.dtype != tensor.dtype or list(want.shape) != list(tensor.shape):
            mismatched.append(f"{name!r}: expected {_describe(want)}, got {_describe(tensor)}")
    problems = []
    if missing:
        problems.append(missing_message(missing, transient, given=True))
    if extra:
        problems.append(
            f"model_state has {len(extra)} tensor(s) the exported model does not: "
            f"{_listed(extra)}. Check that the checkpoint is this model's (names must match "
            "the exported module's state_dict, prefixes included)."
        )
    if mismatched:
        problems.append(
            f"{len(mismatched)} tensor(s) have another dtype or shape than at export: "
            + "; ".join(mismatched[:_LISTED])
            + (f"; and {len(mismatched) - _LISTED} more" if len(mismatched) > _LISTED else "")
            + "."
        )
    if problems:
        raise WeightsError(" ".join(problems))
    return {weights[name]: tensor for name, tensor in tensors.items() if name in weights}


@contextlib.contextmanager
def attached(data: Mapping[ir.Value, ir.TensorProtocol]) -> Iterator[None]:
    """Give each value its tensor for the duration of the block, then restore it."""
    previous: dict[ir.Value, ir.TensorProtocol | None] = {v: v.const_value for v in data}
    try:
        for value, tensor in data.items():
            value.const_value = tensor
        yield
    finally:
        for value, before in previous.items():
            value.const_value = before


def placeholder_or_tensor(name: str, tensor: torch.Tensor) -> ir.TensorProtocol:
    """The initializer data for ``tensor``: the live tensor, or a placeholder if fake/meta."""
    if has_no_data(tensor):
        shape = onnx_dims(tensor.dtype, [int(d) for d in tensor.shape])
        return WeightPlaceholder(name, to_ir_dtype(tensor.dtype), [int(d) for d in shape])
    if tensor.dtype in PACKED_X2:
        return float4_initializer(tensor, name)
    return TorchTensor(tensor.detach(), name=name)
