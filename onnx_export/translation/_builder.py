"""The graph builder that tags every ONNX node with the FX node it came from.

Its values are :class:`RecordedValue`: ``ir.Value`` plus the Python operators torchlib's
code uses on values under torch.onnx (``op.Shape(window) < n_fft``, ``x % 2``, ``x ** 2``,
``x.rank``), each recording an ONNX op while the translator records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import onnxscript
import torch.fx
from onnxscript._internal.param_manipulation import separate_input_attributes_from_arguments
from onnxscript._internal.tape_builder import BuilderFeature

from onnx_export.passes._inference import Constants, fast_attributes, infer_outputs, op_schema
from onnx_export.translation._source import node_origin

__all__ = ["RecordedValue", "TaggingGraphBuilder", "recorded"]

_FLOATS = frozenset(
    {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}
)


class RecordedValue(ir.Value):
    """An ``ir.Value`` on which comparisons and more arithmetic with Python numbers record ops.

    ``ir.Value`` already records ``+ - * /`` and unary ``-`` through onnx_ir's magic
    handler (the recording builder's ``op``, see ``translation/_recorder.py``); this adds
    ``< <= > >=``, ``%``, ``**``, ``@``, ``&``, ``|``, ``~`` and the ``rank`` property, as
    torch.onnx's values have them. ``==``, ``!=`` and hashing stay identity, as the
    translator keys dicts and sets by value. The truth value of a value is True (as under
    torch.onnx: torchlib's ``if n_win < n_fft:`` then takes the branch that is right for
    every size).
    """

    __slots__ = ()

    @property
    def rank(self) -> int | None:
        """The number of dimensions, when the graph knows it."""
        return len(self.shape) if self.shape is not None else None

    def _handler(self) -> Any:
        return self._get_magic_handler()  # type: ignore[no-untyped-call]  # onnx_ir's

    def __lt__(self, other: Any) -> Any:
        return self._handler().Less(self, other)

    def __le__(self, other: Any) -> Any:
        return self._handler().LessOrEqual(self, other)

    def __gt__(self, other: Any) -> Any:
        return self._handler().Greater(self, other)

    def __ge__(self, other: Any) -> Any:
        return self._handler().GreaterOrEqual(self, other)

    def __mod__(self, other: Any) -> Any:
        if self.dtype in _FLOATS:
            return self._handler().Mod(self, other, fmod=1)
        return self._handler().Mod(self, other)

    def __pow__(self, other: Any) -> Any:
        return self._handler().Pow(self, other)

    def __rpow__(self, other: Any) -> Any:
        return self._handler().Pow(other, self)

    def __matmul__(self, other: Any) -> Any:
        return self._handler().MatMul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return self._handler().MatMul(other, self)

    def __and__(self, other: Any) -> Any:
        return self._handler().And(self, other)

    def __rand__(self, other: Any) -> Any:
        return self._handler().And(other, self)

    def __or__(self, other: Any) -> Any:
        return self._handler().Or(self, other)

    def __ror__(self, other: Any) -> Any:
        return self._handler().Or(other, self)

    def __invert__(self) -> Any:
        return self._handler().Not(self)

    # ``__eq__`` and ``__hash__`` are ``ir.Value``'s (identity); redefining ``<`` would
    # otherwise make Python drop the inherited hash.
    __hash__ = ir.Value.__hash__


def recorded(value: Any) -> Any:
    """``value`` (an ``ir.Value``, or a list/tuple of them) as :class:`RecordedValue`, in place.

    The same objects: only their class changes (``RecordedValue`` adds no state), so
    every identity the translator relies on (env dicts, graph inputs, uses) holds.
    """
    if type(value) is ir.Value:
        value.__class__ = RecordedValue
    elif isinstance(value, (list, tuple)):
        for item in value:
            recorded(item)
    return value


class _Answers:
    """A ``BuilderFeature`` value whose ``&`` with a feature is a dict lookup.

    onnxscript's ``call_op`` tests ``features & BuilderFeature.X`` six times for every
    node it records; each ``enum.Flag`` ``&`` builds a new flag (5% of translation, #39).
    The answers are the flag's own, made once; a combination not made here is computed.
    """

    __slots__ = ("_answers", "_flags")

    def __init__(self, flags: BuilderFeature) -> None:
        self._flags = flags
        self._answers = {feature: flags & feature for feature in BuilderFeature}
        for name in ("SCHEMA_AWARE", "FULL"):
            combination = BuilderFeature[name]
            self._answers[combination] = flags & combination

    def __and__(self, feature: BuilderFeature) -> BuilderFeature:
        found = self._answers.get(feature)
        return found if found is not None else self._flags & feature


class TaggingGraphBuilder(onnxscript.GraphBuilder):
    """A ``GraphBuilder`` whose nodes carry their FX node, module scope and source line.

    Serialised metadata stays small (module scope, FX node name, ``file:line``); the
    full stack trace is kept in memory only (``node.meta["stack_trace"]``).
    """

    def __init__(self, graph: ir.Graph, *, parent: TaggingGraphBuilder | None = None) -> None:
        super().__init__(graph, parent=parent)
        self.current_fx_node: torch.fx.Node | None = None
        self._tags: dict[str, str] = {}
        self._stack_trace = ""
        self._constants: Constants = {}  # small constants' data, for the shape inference
        self._features = _Answers(self._features)  # type: ignore[assignment]  # see _Answers

    @property
    def features(self) -> BuilderFeature:
        """The builder's features (onnxscript's: all of them)."""
        flags = self._features
        return getattr(flags, "_flags", flags)  # _Answers

    def set_fx_node(self, node: torch.fx.Node | None) -> None:
        """Tag the nodes created from now on with ``node``'s origin."""
        self.current_fx_node = node
        if node is None:
            self._tags, self._stack_trace = {}, ""
            return
        origin = node_origin(node)
        self._tags = {"pkg.onnx_export.fx_node": node.name}
        if origin.module_path or origin.module_class:
            self._tags["namespace"] = f"{origin.module_path}: {origin.module_class}"
        if origin.file:
            self._tags["pkg.onnx_export.source"] = f"{origin.file}:{origin.line}"
        self._stack_trace = origin.stack_trace

    def _annotate_node(self, node: ir.Node) -> None:
        pass  # tags are applied in _add_node, which every path goes through

    def _add_node(self, node: ir.Node) -> None:
        node.metadata_props.update(self._tags)
        if self._stack_trace:
            node.meta["stack_trace"] = self._stack_trace
        if self.current_fx_node is not None:
            node.meta["fx_node"] = self.current_fx_node.name
        super()._add_node(node)

    def _partition_inputs_attributes(
        self, schema: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[Sequence[Any], dict[str, Any]]:
        # onnxscript builds the op's signature from its schema at every call (a fifth of
        # the translation of a vision model, #22); one signature per op and version.
        if schema is None:
            return args, kwargs
        signature = _signature(schema.domain, schema.name, schema.since_version, schema)
        return separate_input_attributes_from_arguments(
            signature, list(args), kwargs, fill_defaults=False, allow_extra_args=False
        )

    def _cast_attributes(self, schema: Any, attributes: dict[str, Any]) -> dict[str, Any]:
        # onnx_ir infers each attribute's type from its Python value through isinstance
        # checks against runtime protocols (a tenth of translation, #39); the plain cases
        # are made here as the same ``ir.Attr``, which it then passes through.
        return fast_attributes(super()._cast_attributes(schema, attributes))

    def _get_schema(self, op_type: str, domain: str, version: int | None) -> Any:
        return op_schema(op_type, domain, version)  # onnxscript's lookup, once per op (#39)

    def _constant_propagation(self, node: ir.Node) -> None:
        # onnxscript's propagation only reads Constant nodes (it returns at once for the
        # rest, after a call and an import: 1,500 a UNet, #39).
        if node.op_type == "Constant":
            super()._constant_propagation(node)

    def _infer_shapes(self, node: ir.Node) -> None:
        # onnxscript's per-node ONNX inference, with its protos cached (#39).
        infer_outputs(node, self._constants)

    def child(self, graph: ir.Graph, scope: str) -> TaggingGraphBuilder:
        """A builder for a subgraph (e.g. an ``If`` branch) whose names carry ``scope``."""
        sub = TaggingGraphBuilder(graph, parent=self)
        sub.push_module(scope)
        sub._tags, sub._stack_trace = dict(self._tags), self._stack_trace
        sub.current_fx_node = self.current_fx_node
        return sub

    def _adapt_outputs(self, outputs: Any, op_type: str) -> Any:
        return recorded(list(super()._adapt_outputs(outputs, op_type)))

    def _get_or_create_constant(self, value: Any, dtype: ir.DataType | None) -> ir.Value:
        # Torchlib passes unnamed tensors (e.g. aten_gelu's sqrt(2)); initializers need
        # names, so those become Constant nodes, which the optimizer folds.
        if isinstance(value, ir.TensorProtocol) and not value.name:
            return self._one("Constant", {"value": value})
        if isinstance(value, (list, tuple)) and not value:  # e.g. sum over dim=[]
            empty = ir.tensor([], dtype=dtype or ir.DataType.INT64)
            return self._one("Constant", {"value": empty})
        result: ir.Value = recorded(super()._get_or_create_constant(value, dtype))
        return result

    def _one(self, op_type: str, attributes: dict[str, Any], *inputs: ir.Value) -> ir.Value:
        result = self.call_op(op_type, list(inputs), attributes)
        assert isinstance(result, ir.Value)
        return result

    def constant(self, value: Any, dtype: ir.DataType | None = None) -> ir.Value:
        """A constant value (cached per value and dtype)."""
        result = (
            self._input_to_ir_value(value)
            if dtype is None
            else self._promote_constant(value, dtype)
        )
        assert isinstance(result, ir.Value)
        return result


_SIGNATURES: dict[tuple[str, str, int], ir.schemas.OpSignature] = {}


def _signature(domain: str, name: str, version: int, schema: Any) -> ir.schemas.OpSignature:
    """The (cached) ``OpSignature`` of ``schema``, keyed by its domain, name and version."""
    key = (domain, name, version)
    found = _SIGNATURES.get(key)
    if found is None:
        found = _SIGNATURES[key] = ir.schemas.OpSignature.from_op_schema(schema)
    return found
