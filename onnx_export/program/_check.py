"""The checker pass: a graph that ONNX's checker or ONNX Runtime refuses is our own error.

Before a model is written (and before the export's parity check runs it), the graph goes
through ``onnx.checker.check_model(..., full_check=True)`` (strict shape and type
inference) and, when its weights are small, through an ONNX Runtime session build. A
refusal becomes an :class:`~onnx_export.errors.InvalidGraphError` naming the ONNX node,
its operator and the model's line it was translated from, instead of a file that ONNX
Runtime refuses later with its own ``InvalidGraph``/``Type Error``.

The checker never copies large weights: initializers above 1 KB are checked as graph
inputs of the same dtype and shape (their values do not matter to type inference; shape
constants, which do, are small and keep their data).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import onnx
import onnx.helper
import onnx.shape_inference
import onnx_ir as ir

from onnx_export.diagnostics import DiagnosticContext, Location, rules
from onnx_export.errors import InvalidGraphError
from onnx_export.program._serialize import initializer_bytes, without_data

__all__ = [
    "SESSION_CHECK_LIMIT",
    "check_graph",
    "invalid_graph_error",
    "record_invalid_graph",
    "session_check_wanted",
]

#: Build an ONNX Runtime session to check the graph only below this many bytes of weights
#: (the build copies the whole model once more; measured in docs/performance.md).
SESSION_CHECK_LIMIT = 64 * 2**20

#: Initializers up to this size keep their data in the checked model (shape constants).
_KEEP_DATA_UP_TO = 1024

_SOURCE_KEY = "pkg.onnx_export.source"
_FX_NODE_KEY = "pkg.onnx_export.fx_node"


def session_check_wanted(model: ir.Model) -> bool:
    """Whether the model is small enough for an ONNX Runtime session build as a check."""
    return initializer_bytes(model) <= SESSION_CHECK_LIMIT


def _checkable_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto whose large (or lazy) initializers are graph inputs (no data)."""
    large = [
        v
        for v in model.graph.initializers.values()
        if v.const_value is not None
        and not isinstance(v.const_value, ir.StringTensor)
        and (v.const_value.nbytes > _KEEP_DATA_UP_TO or isinstance(v.const_value, ir.LazyTensor))
    ]
    try:
        with without_data(large):
            proto = ir.serde.serialize_model(model)
    except Exception as error:  # onnx_ir's SerdeError (and what it wraps): no file possible
        raise invalid_graph_error(model, _chained(error), "onnx_ir's serializer") from error
    stripped = {v.name for v in large}
    kept = [t for t in proto.graph.initializer if t.name not in stripped]
    declared = {i.name for i in proto.graph.input}
    for tensor in proto.graph.initializer:
        if tensor.name in stripped and tensor.name not in declared:
            proto.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    return proto


def _chained(error: BaseException) -> str:
    """The error's message and those of its causes (SerdeError wraps the one that names)."""
    parts: list[str] = []
    current: BaseException | None = error
    while current is not None and len(parts) < 4:
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def check_graph(model: ir.Model) -> bool:
    """Run onnx's full checker on ``model``.

    Returns:
        ``False`` when the graph has ops ONNX does not define (ONNX Runtime's contrib ops
        in the default domain, such as ``SimplifiedLayerNormalization`` of
        ``target="onnxruntime"``): only ONNX Runtime can check it then.

    Raises:
        InvalidGraphError: The checker (or onnx_ir's serializer) refused the graph; names
            the node and its line when the message names one.
    """
    proto = _checkable_proto(model)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        if "No Op registered for" in str(error):
            return False
        raise invalid_graph_error(model, str(error), "ONNX's checker") from error
    return True


def _nodes(model: ir.Model) -> Iterator[ir.Node]:
    yield from ir.traversal.RecursiveGraphIterator(model.graph)
    for function in model.functions.values():
        yield from ir.traversal.RecursiveGraphIterator(function)


def _named_node(model: ir.Model, message: str) -> ir.Node | None:
    """The node the message names: ``node name: X``, ``node (X)``, ``Node (X)``, ``'X'``."""
    by_name = {node.name: node for node in _nodes(model) if node.name}
    patterns = (
        r"node name: ([^\s)]+)",
        r"[Nn]ode \(([^)]+)\)",
        r"Name: ([^\s]+)",
        r"[Nn]ode:? '?([\w./:-]+)'?",
    )
    for pattern in patterns:
        for match in re.finditer(pattern, message):
            node = by_name.get(match.group(1))
            if node is not None:
                return node
    return None


def invalid_graph_error(model: ir.Model, message: str, checker: str) -> InvalidGraphError:
    """Our error for a checker's (or ONNX Runtime's) refusal ``message`` of ``model``."""
    reason = " ".join(message.split())
    reason = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", reason)
    node = _named_node(model, message)
    name = (node.name or "") if node is not None else ""
    op = node.op_type if node is not None else ""
    where = node.metadata_props.get(_SOURCE_KEY, "") if node is not None else ""
    fx = node.metadata_props.get(_FX_NODE_KEY, "") if node is not None else ""
    at = f" Node {name} ({op}" if node is not None else " The checker named no node"
    if node is not None:
        at += f", from FX node {fx}" if fx else ""
        at += f", translated from {where}" if where else ""
        at += ")."
    else:
        at += "."
    return InvalidGraphError(
        f"The exported ONNX graph is invalid: {checker} refuses it: {reason}.{at} Nothing was "
        "written. This is a bug of the translation (or of an edit to program.model): the "
        "file would be refused by ONNX Runtime. Next steps: report it with the SARIF report "
        "attached, or register a correct ONNX function for that op with "
        "OnnxRegistry.register_op.",
        node=name,
        op=op,
        where=where,
        reason=reason,
    )


def record_invalid_graph(context: DiagnosticContext, error: InvalidGraphError) -> None:
    """An OXE0024 entry for ``error``, located at the model's line of the node."""
    locations: tuple[Location, ...] = ()
    file, _, line = error.where.rpartition(":")
    if file and line.isdigit():
        locations = (Location(file, int(line)),)
    context.emit(
        rules.INVALID_GRAPH,
        message_args={"node": error.node or "-", "op": error.op or "-", "reason": error.reason},
        locations=locations,
    )
