"""onnxscript's per-node shape inference and attribute conversion, made cheaper (#39).

The graph builder infers every recorded node's output types with ONNX's C++ inference,
and onnxscript hands it protos that onnx_ir serializes for each node: each input's type
again and again (the same few types, thousands of times), then each result parsed back.
That was a third of translation on the bench families. Here the same inference runs on
the same node, input types and constant data, with each distinct input type serialized
once and each distinct result parsed once; what reaches the values (shape merge, type,
the error recorded on a node) is what onnxscript's ``infer_outputs`` would give. Anything
out of the plain case (an input without a name, a sequence type, an exception) goes
through onnxscript's own function, which then records its own error message.

``fast_attributes`` builds the ``ir.Attr`` that ``onnx_ir.convert_attributes`` would
infer for plain ints, floats, strings, their lists and ``ir.Tensor`` values, without its
``isinstance`` checks against runtime protocols (a tenth of translation).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import onnx
import onnx.defs
import onnx_ir as ir
from onnxscript._internal import _inference

__all__ = [
    "Constants",
    "fast_attributes",
    "infer_outputs",
    "inferred_types",
    "inferred_result",
    "op_schema",
]

# Distinct types are few (dtype x shape); a bound keeps a pathological model's cache small.
_CACHE_LIMIT = 4096
_TYPE_BYTES: dict[tuple[Any, ...], bytes] = {}
_RESULTS: dict[bytes, tuple[ir.Shape | None, onnx.TypeProto]] = {}
_ERROR_KEY = "pkg.onnxscript.shape_inference_error"  # onnxscript's key


@functools.cache
def op_schema(op_type: str, domain: str, version: int | None) -> onnx.defs.OpSchema | None:
    """ONNX's schema of an op at opset ``version``, cached; ``None`` without one (or a version).

    onnxscript's ``BuilderBase._get_schema``, looked up once per op, for the graph builder
    and for the inference below.
    """
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None


def _shape_key(shape: ir.Shape) -> tuple[Any, ...] | None:
    dims: list[Any] = []
    for dim in shape.dims:
        if type(dim) is int:
            dims.append(dim)
        elif type(dim) is ir.SymbolicDim:
            dims.append((dim.value,))
        else:
            return None
    denotations = getattr(shape, "_denotations", None)
    if denotations is None:
        return None
    return (*dims, tuple(denotations))


def _type_bytes(value: ir.Value) -> bytes:
    """The ``TypeProto`` of the value's type and shape (onnxscript's ``get_type``), serialized."""
    value_type, shape = value.type, value.shape
    key: tuple[Any, ...] | None = None
    if type(value_type) is ir.TensorType and (shape is None or type(shape) is ir.Shape):
        shape_key = _shape_key(shape) if shape is not None else ()
        if shape_key is not None:
            key = (value_type.dtype, value_type.denotation, shape is None, shape_key)
            found = _TYPE_BYTES.get(key)
            if found is not None:
                return found
    assert value_type is not None  # checked by the caller
    type_proto = ir.serde.serialize_type(value_type)
    if shape is not None:
        ir.serde.serialize_shape_into(type_proto, shape)
    data: bytes = type_proto.SerializeToString()
    if key is not None and len(_TYPE_BYTES) < _CACHE_LIMIT:
        _TYPE_BYTES[key] = data
    return data


#: Per translation or fold: ``id(tensor)`` to the tensor and its small data serialized.
Constants = dict[int, tuple[Any, bytes | None]]


def _constant_bytes(value: ir.Value, seen: Constants | None) -> bytes | None:
    """The data of a small constant (onnxscript's ``get_constant_value``), serialized.

    ``seen`` keeps each tensor's answer for the caller's one translation or fold (weights
    and constants, each asked at every use, are not changed in between).
    """
    tensor = value.const_value
    if tensor is None:
        return None
    known = seen.get(id(tensor)) if seen is not None else None
    if known is not None and known[0] is tensor:
        return known[1]
    data = None
    if _inference._get_numpy_value(value, size_limit=20) is not None:
        data = ir.serde.serialize_tensor(tensor).SerializeToString()
    if seen is not None:
        seen[id(tensor)] = (tensor, data)  # held: its id stays its own while cached
    return data


def _node_bytes(node: ir.Node) -> bytes:
    """``ir.serde.serialize_node(node)`` less what inference never reads, serialized.

    The name, doc string and metadata (three entries a node here) do not change what ONNX
    infers; an error, which would name the node, is met again on onnxscript's path.
    """
    proto = onnx.NodeProto()
    proto.op_type = node.op_type
    if node.domain:
        proto.domain = node.domain
    if node.overload:
        proto.overload = node.overload
    # A value without a name raises here: onnxscript's path then meets it.
    proto.input.extend("" if value is None else value.name for value in node.inputs)
    proto.output.extend(value.name for value in ir.serde._remove_trailing_outputs(node.outputs))
    for attr in node.attributes.values():
        if attr.is_ref():
            ir.serde.serialize_reference_attribute_into(proto.attribute.add(), attr)
        else:
            ir.serde.serialize_attribute_into(proto.attribute.add(), attr)
    data: bytes = proto.SerializeToString()
    return data


def inferred_types(
    node: ir.Node, version: int | None, seen: Constants | None = None
) -> dict[str, bytes] | None:
    """ONNX's inferred output types of ``node`` (serialized) at opset ``version``.

    None when an input has no name or no type, or ONNX has no schema for the op: the
    caller takes onnxscript's own path.
    """
    types: dict[str, bytes] = {}
    data: dict[str, bytes] = {}
    for value in node.inputs:
        if value is None:
            continue
        if not value.name or value.type is None:
            return None
        types[value.name] = _type_bytes(value)
        constant = _constant_bytes(value, seen)
        if constant is not None:
            data[value.name] = constant
    schema = op_schema(node.op_type, node.domain, version)
    if schema is None:
        return None  # onnxscript's path meets the lookup's error, and records it
    # What onnx.shape_inference.infer_node_outputs calls, on bytes kept from earlier nodes.
    outputs: dict[str, bytes] = schema._infer_node_outputs(  # type: ignore[call-arg]  # onnx's stub lacks the last two
        _node_bytes(node), types, data, {}, {}, onnx.IR_VERSION
    )
    return outputs


def inferred_result(data: bytes) -> tuple[ir.Shape | None, onnx.TypeProto]:
    """The shape (frozen, shared: copy it) and ``TypeProto`` of an inferred type."""
    found = _RESULTS.get(data)
    if found is None:
        proto = onnx.TypeProto.FromString(data)
        found = (ir.serde.deserialize_type_proto_for_shape(proto), proto)
        if len(_RESULTS) < _CACHE_LIMIT:
            _RESULTS[data] = found
    return found


def infer_outputs(node: ir.Node, seen: Constants | None = None) -> None:
    """``onnxscript._internal._inference.infer_outputs(node)``, with cached protos.

    The shape kept in the cache is never a value's: ``Value.merge_shapes`` copies the one
    it is given, and each value gets a type of its own.
    """
    if all(_inference._has_complete_type_and_shape(output) for output in node.outputs):
        return
    try:
        outputs = inferred_types(node, node.version, seen)
    except Exception:  # onnxscript's path raises it again and records it
        outputs = None
    if outputs is None:
        _inference.infer_outputs(node)
        return
    try:
        for output in node.outputs:
            if output.name in outputs:
                shape, proto = inferred_result(outputs[output.name])
                output.merge_shapes(shape)
                output.type = ir.serde.deserialize_type_proto_for_type(proto)
    except Exception as error:  # as onnxscript: inference is best effort
        node.metadata_props[_ERROR_KEY] = str(error)


_SCALARS: dict[type, Any] = {
    int: ir.AttrInt64,
    bool: ir.AttrInt64,  # onnx_ir's isinstance(value, int)
    float: ir.AttrFloat32,
    str: ir.AttrString,
    ir.Tensor: ir.AttrTensor,
}


def _sequence(kinds: set[type]) -> Any:
    if kinds <= {int, bool}:
        return ir.AttrInt64s
    if kinds == {float}:
        return ir.AttrFloat32s
    if kinds == {str}:
        return ir.AttrStrings
    return None


def _attribute(name: str, value: Any) -> Any:
    """The ``ir.Attr`` onnx_ir's ``convert_attribute`` infers for ``value``, or ``value``."""
    make = _SCALARS.get(type(value))
    if make is None and type(value) in (list, tuple) and value:
        make = _sequence({type(item) for item in value})
    return make(name, value) if make is not None else value  # else: onnx_ir's inference


def fast_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` with the plain values already made into ``ir.Attr``."""
    return {name: _attribute(name, value) for name, value in attributes.items()}
