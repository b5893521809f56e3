"""An onnxscript evaluator that records ops into an ``onnx_ir`` graph instead of running them.

Torchlib's functions are ordinary Python that call ``op.X(...)``; onnxscript sends each
call to the current default evaluator. Ours appends a node to a ``GraphBuilder``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir
from onnxscript import evaluator as onnxscript_evaluator

from onnx_export.translation._builder import TaggingGraphBuilder, recorded

__all__ = ["OpRecorder", "recording"]

# onnxscript's default evaluator is process-global: one recording at a time.
_RECORDING_LOCK = threading.RLock()


def _split_count(kwargs: Mapping[str, Any]) -> int:
    if "num_outputs" in kwargs:
        return int(kwargs["num_outputs"])
    split = kwargs.get("split")
    if isinstance(split, ir.Value) and split.const_value is not None:
        return int(split.const_value.numpy().size)
    if isinstance(split, (list, tuple)):
        return len(split)
    raise ValueError("Split needs num_outputs or a constant split to know its output count.")


def _graph_outputs(body: Any) -> int:
    graph = body.value if isinstance(body, ir.Attr) else body
    return len(graph.outputs)


def _num_outputs(schema: onnx.defs.OpSchema | None, kwargs: Mapping[str, Any]) -> int:
    """How many outputs to create for an op, as its schema and attributes say."""
    if schema is None:
        return 1
    if schema.domain == "":
        name = schema.name
        if name == "BatchNormalization" and not kwargs.get("training_mode", 0):
            return 1
        if name == "Split":
            return _split_count(kwargs)
        if name == "Scan":
            return _graph_outputs(kwargs["body"])
        if name == "Loop":
            return _graph_outputs(kwargs["body"]) - 1
    outputs = schema.outputs
    if outputs and outputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        raise ValueError(f"Cannot tell how many outputs {schema.name} has.")
    return len(outputs)


class OpRecorder:
    """Evaluator (onnxscript's protocol) that appends every op to a graph builder."""

    def __init__(self, builder: TaggingGraphBuilder) -> None:
        self.builder = builder

    def eval_op(
        self, op: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> ir.Value | Sequence[ir.Value]:
        """Record one ONNX op and return its output value(s)."""
        schema = op.op_schema
        inputs: list[Any] = [self._sequence_to_tensor(a) for a in args]
        attributes = {k: v for k, v in kwargs.items() if v is not None}
        count_kwargs = dict(attributes)
        if schema is not None and schema.name == "Split" and len(inputs) > 1:
            count_kwargs["split"] = inputs[1]
        outputs = _num_outputs(schema, count_kwargs)
        version = op.opset.version if op.domain == "" else None
        return self.builder.call_op(
            op.name, inputs, attributes, domain=op.domain, version=version, outputs=outputs
        )

    def eval_function(
        self, function: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> ir.Value | Sequence[ir.Value]:
        """Inline a scripted onnxscript function's body, binding constants to its types."""
        signature = function.op_signature
        if signature is None:  # pragma: no cover - onnxscript always sets one
            raise TypeError(f"onnxscript function {function.name} has no signature.")
        bound = dict(zip((p.name for p in signature.params), args, strict=False)) | dict(kwargs)
        inputs: list[ir.Value | None] = []
        attributes: dict[str, ir.Attr] = {}
        type_of: dict[str, ir.Value] = {}
        for param in signature.params:
            value = bound.get(param.name)
            if isinstance(param, ir.schemas.Parameter) and isinstance(value, ir.Value):
                type_of.setdefault(param.type_constraint.name, value)
        for param in signature.params:
            value = bound.get(param.name, getattr(param, "default", None))
            if isinstance(param, ir.schemas.AttributeParameter):
                attr = self._attribute(param, value)
                if attr is not None:
                    attributes[param.name] = attr
            else:
                like = type_of.get(param.type_constraint.name)
                inputs.append(self._to_value(value, like))
        while inputs and inputs[-1] is None:
            inputs.pop()
        result = self.builder.call_inline(function, *inputs, **attributes)  # type: ignore[arg-type]  # attrs pass through **kwargs
        return recorded(result)  # type: ignore[no-any-return]  # onnxscript is untyped here

    def _sequence_to_tensor(self, value: Any) -> Any:
        """A list mixing ints and symbolic scalars (e.g. a shape) as one INT64 tensor."""
        if not isinstance(value, (list, tuple)) or not any(isinstance(v, ir.Value) for v in value):
            return value
        builder = self.builder
        flat = builder.constant([-1])
        parts = [
            builder.call_op("Reshape", [v, flat], {})
            if isinstance(v, ir.Value)
            else builder.constant([int(v)])
            for v in value
        ]
        if len(parts) == 1:
            return parts[0]
        return builder.call_op("Concat", parts, {"axis": 0})

    def _attribute(self, param: ir.schemas.AttributeParameter, value: Any) -> ir.Attr | None:
        if isinstance(value, ir.Attr):
            return ir.Attr(param.name, value.type, value.value)
        if value is None:
            return None
        if param.type == ir.AttributeType.FLOAT:
            value = float(value)
        elif param.type == ir.AttributeType.INT:
            value = int(value)
        return ir.Attr(param.name, param.type, value)

    def _to_value(self, value: Any, like: ir.Value | None) -> ir.Value | None:
        if value is None or isinstance(value, ir.Value):
            return value
        return self.builder._input_to_ir_value(value, like)


@contextlib.contextmanager
def recording(builder: TaggingGraphBuilder) -> Iterator[OpRecorder]:
    """Route onnxscript op calls into ``builder`` for the duration of the block."""
    recorder = OpRecorder(builder)
    with _RECORDING_LOCK, onnxscript_evaluator.default_as(recorder):
        previous = ir.set_value_magic_handler(builder.op)  # `a + b` on values records Add
        try:
            yield recorder
        finally:
            ir.set_value_magic_handler(previous)
