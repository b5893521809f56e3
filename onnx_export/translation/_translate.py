"""Translate an ``ExportedProgram``'s FX graph into an ``onnx_ir`` model, node by node."""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from onnx_export._dtypes import onnx_dims, to_ir_dtype, value_dtype
from onnx_export._fake import WEIGHT_KEY, WeightPlaceholder, placeholder_or_tensor
from onnx_export._progress import translation_progress
from onnx_export._registry import OnnxRegistry
from onnx_export.ops._target_opset import targeting
from onnx_export.translation._builder import TaggingGraphBuilder
from onnx_export.translation._control_flow import HIGHER_ORDER_OPS, PRODUCER_OPSET
from onnx_export.translation._dispatch import Dispatch, dispatch
from onnx_export.translation._naming import MergedDimName, axis_ranges, int_range
from onnx_export.translation._operands import complex_scalar_dispatch, operand_values
from onnx_export.translation._recorder import recording
from onnx_export.translation._source import NodeOrigin, node_origin
from onnx_export.translation._symbolic import symbolic_dispatch
from onnx_export.translation._symbolic_scalars import symbolic_scalar_dispatch

__all__ = [
    "UnsupportedNode",
    "NodeTranslationError",
    "TranslationResult",
    "translate",
    "find_unsupported",
    "walk_call_nodes",
    "decision_key",
    "PYTHON_INT_KEY",
    "INT_RANGE_KEY",
    "AXIS_RANGES_KEY",
]

_PRODUCER_OPSET = PRODUCER_OPSET

PYTHON_INT_KEY = "onnx_export.python_int"
"""``ir.Value.meta`` key of a graph input fed from a Python int: its input path (``"n"``)."""

INT_RANGE_KEY = "onnx_export.int_range"
"""``ir.Value.meta`` key of such an input's range, ``(low, high)``, ``None`` where unbounded."""

AXIS_RANGES_KEY = "onnx_export.axis_ranges"
"""``ir.Value.meta`` key of a tensor input's symbolic axes: ``((axis, symbol, low, high), ...)``."""

# Higher-order ops whose body is simply inlined: (operand index where the body starts).
_INLINED_HOPS = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}


@dataclasses.dataclass(frozen=True)
class UnsupportedNode:
    """An FX node that has no ONNX function.

    Attributes:
        op: The operator name, e.g. ``"mylib::my_op"``.
        node: The FX node's name.
        origin: Module path and user source line.
        reason: Why dispatch found nothing.
    """

    op: str
    node: str
    origin: NodeOrigin
    reason: str


class NodeTranslationError(RuntimeError):
    """An ONNX function raised while translating one FX node."""

    def __init__(
        self, node: torch.fx.Node, decision: Dispatch | None, cause: BaseException
    ) -> None:
        function = decision.entry.name if decision and decision.entry else "-"
        super().__init__(
            f"{type(cause).__name__}: {cause} (while translating FX node {node.name!r}, "
            f"op {node.target}, with ONNX function {function})"
        )
        self.node = node
        self.decision = decision
        self.origin = node_origin(node)


@dataclasses.dataclass
class TranslationResult:
    """The translated model and what happened on the way.

    Attributes:
        model: The ONNX model (opset 18, not optimized yet).
        decisions: The dispatch decision of each FX node, by node name.
        dropped_buffer_mutations: Buffers that ``forward`` mutates (not model outputs).
        user_outputs: Per output of ``forward`` (flattened): its graph output value, or the
            Python constant / ``None`` it always is.
        merged_dim_names: Dynamic axis names the graph does not use, because torch found
            their axes equal to axes named otherwise.
    """

    model: ir.Model
    decisions: dict[str, Dispatch]
    dropped_buffer_mutations: list[str]
    user_outputs: list[Any] = dataclasses.field(default_factory=list)
    merged_dim_names: tuple[MergedDimName, ...] = ()


def _is_hop(target: object) -> bool:
    return isinstance(target, torch._ops.HigherOrderOperator)


def walk_call_nodes(
    gm: torch.fx.GraphModule, _seen: set[int] | None = None
) -> Iterable[torch.fx.Node]:
    """Every call node of ``gm`` and of its bodies (a body called twice is walked once)."""
    seen = set() if _seen is None else _seen
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if _is_hop(node.target):
            for arg in node.args:
                if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
                    sub = getattr(gm, str(arg.target))
                    if isinstance(sub, torch.fx.GraphModule) and id(sub) not in seen:
                        seen.add(id(sub))
                        yield from walk_call_nodes(sub, seen)
            continue
        if node.target is operator.getitem:
            continue
        yield node


def decision_key(node: torch.fx.Node) -> str:
    """Key of a node's dispatch decision (node names repeat across subgraphs)."""
    return f"{id(node.graph)}:{node.name}"


def find_unsupported(
    gm: torch.fx.GraphModule, registry: OnnxRegistry
) -> tuple[dict[str, Dispatch], list[UnsupportedNode]]:
    """Dispatch every call node (subgraphs included); collect all that have no function."""
    decisions: dict[str, Dispatch] = {}
    unsupported: list[UnsupportedNode] = []
    for node in walk_call_nodes(gm):
        decision = (
            symbolic_dispatch(node, registry)
            or complex_scalar_dispatch(node, registry)
            or symbolic_scalar_dispatch(node, registry)
            or dispatch(node, registry)
        )
        decisions[decision_key(node)] = decision
        if decision.entry is None:
            unsupported.append(
                UnsupportedNode(decision.target, node.name, node_origin(node), decision.reason)
            )
    return decisions, unsupported


_SYMBOL = re.compile(r"\b[su]\d+\b")


def _symbolic_dim(dim: object, dim_names: Mapping[str, str]) -> int | str:
    if isinstance(dim, int):
        return dim
    expr = str(dim.node.expr) if isinstance(dim, torch.SymInt) else str(dim)
    if expr in dim_names:
        return dim_names[expr]
    # An expression of named dims reads with their names: "s10 + s70" -> "past + seq".
    return _SYMBOL.sub(lambda m: dim_names.get(m.group(0), m.group(0)), expr)


class _Sequence(tuple):  # type: ignore[type-arg]  # of FX meta values, any kind
    """The FX meta of a list output that ONNX returns as one sequence value."""


def _set_type_and_shape(value: ir.Value, val: object, dim_names: Mapping[str, str]) -> None:
    if isinstance(val, _Sequence):  # a sequence of tensors: typed, no shape
        dtypes = {value_dtype(v) for v in val}
        if len(dtypes) == 1 and None not in dtypes:
            value.type = ir.SequenceType(ir.TensorType(dtypes.pop()))  # type: ignore[arg-type]  # checked above
        return
    dtype = value_dtype(val)
    if dtype is None:
        return
    value.dtype = dtype
    if isinstance(val, torch.Tensor):
        dims = onnx_dims(val.dtype, [_symbolic_dim(d, dim_names) for d in val.shape])
        if val.is_complex():
            dims.append(2)
        value.shape = ir.Shape(dims)
    elif value.shape is None:
        value.shape = ir.Shape([])


class _Translator:
    def __init__(
        self,
        program: ExportedProgram,
        decisions: dict[str, Dispatch],
        dim_names: Mapping[str, str],
    ) -> None:
        self.program = program
        self.decisions = decisions
        self.dim_names = dim_names
        self.graph = ir.Graph([], [], nodes=[], opset_imports={"": _PRODUCER_OPSET}, name="main")
        self.builder = TaggingGraphBuilder(self.graph)
        self._used_names: set[str] = set()

    # -- arguments -------------------------------------------------------------------

    def convert(self, arg: Any, env: Mapping[torch.fx.Node, Any]) -> Any:
        """An FX argument as what ONNX functions take (nodes looked up in ``env``)."""
        if isinstance(arg, torch.fx.Node):
            return env[arg]
        if isinstance(arg, (list, tuple)):
            return [self.convert(a, env) for a in arg]
        if isinstance(arg, torch.dtype):
            return int(to_ir_dtype(arg))
        if isinstance(arg, (torch.device, torch.layout, torch.memory_format)):
            return str(arg)
        return arg

    def set_type(self, value: ir.Value, val: object) -> None:
        """Give ``value`` the dtype and shape (named dims) of an FX ``meta["val"]``."""
        _set_type_and_shape(value, val, self.dim_names)

    # -- nodes -----------------------------------------------------------------------

    def name_outputs(self, node: torch.fx.Node, result: Any, prefix: str) -> None:
        """Name the values ``node`` produced after it (and type them from its meta)."""
        values = result if isinstance(result, (list, tuple)) else [result]
        vals = node.meta.get("val")
        metas = vals if isinstance(vals, (list, tuple)) else [vals]
        if isinstance(result, ir.Value) and isinstance(vals, (list, tuple)):
            metas = [_Sequence(vals)]  # one ONNX sequence (SplitToSequence) for a list
        for i, value in enumerate(values):
            if not isinstance(value, ir.Value) or value.producer() is None:
                continue
            if value.name in self._used_names or value.is_graph_input():
                continue
            name = f"{prefix}{node.name}" if len(values) == 1 else f"{prefix}{node.name}.{i}"
            value.name = name
            self._used_names.add(name)
            if i < len(metas):
                _set_type_and_shape(value, metas[i], self.dim_names)

    def _call_function(
        self,
        node: torch.fx.Node,
        env: dict[torch.fx.Node, Any],
        builder: TaggingGraphBuilder,
        prefix: str,
    ) -> Any:
        if node.target is operator.getitem:
            container, index = env[node.args[0]], node.args[1]  # type: ignore[index]
            if isinstance(container, ir.Value):  # an ONNX sequence (e.g. from SplitToSequence)
                with recording(builder):
                    item = builder.op.SequenceAt(container, builder.constant(int(index)))  # type: ignore[arg-type]
                self.name_outputs(node, item, prefix)
                return item
            return container[index]
        if _is_hop(node.target):
            return self._higher_order(node, env, builder, prefix)
        decision = self.decisions[decision_key(node)]
        assert decision.entry is not None  # unsupported nodes were reported before
        with recording(builder):
            args = operand_values(
                node, decision.args, [self.convert(a, env) for a in decision.args]
            )
            result = decision.entry.function(*args)
        if (
            isinstance(result, (list, tuple))
            and len(result) == 1
            and not isinstance(node.meta.get("val"), (list, tuple))
        ):
            result = result[0]
        self.name_outputs(node, result, prefix)
        return result

    def _higher_order(
        self,
        node: torch.fx.Node,
        env: dict[torch.fx.Node, Any],
        builder: TaggingGraphBuilder,
        prefix: str,
    ) -> Any:
        name = node.target.__name__  # type: ignore[union-attr]
        translation = HIGHER_ORDER_OPS.get(name)
        if translation is not None:
            return translation(self, node, env, builder, prefix)
        if name in _INLINED_HOPS:
            start = _INLINED_HOPS[name]
            sub_gm = getattr(node.graph.owning_module, str(node.args[start].target))  # type: ignore[union-attr]
            inputs = [self.convert(o, env) for o in node.args[start + 1 :]]
            return self.inline(sub_gm, inputs, builder, f"{prefix}{node.name}.")
        raise NotImplementedError(
            f"higher-order op {name} (supported: {', '.join(sorted(HIGHER_ORDER_OPS))})"
        )

    def inline(
        self,
        gm: torch.fx.GraphModule,
        inputs: Sequence[Any],
        builder: TaggingGraphBuilder,
        prefix: str,
    ) -> list[Any]:
        """Translate ``gm``'s nodes into ``builder`` with ``inputs``; return its outputs."""
        env: dict[torch.fx.Node, Any] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        env.update(zip(placeholders, inputs, strict=True))
        outputs: list[Any] = []
        for node in gm.graph.nodes:
            if node.op == "call_function":
                builder.set_fx_node(node)
                env[node] = self._call_function(node, env, builder, prefix)
            elif node.op == "get_attr":
                env[node] = self._attribute(gm, node, builder)
            elif node.op == "output":
                result = node.args[0]
                result = result if isinstance(result, (list, tuple)) else [result]
                outputs = [self.convert(o, env) for o in result]
        return outputs

    def _attribute(
        self, gm: torch.fx.GraphModule, node: torch.fx.Node, builder: TaggingGraphBuilder
    ) -> Any:
        """A body's ``get_attr``: a tensor constant (as a ``Constant``) or a nested body."""
        attr = getattr(gm, str(node.target))
        if not isinstance(attr, torch.Tensor):
            return attr  # a nested body, read by the higher-order op that uses it
        tensor = torch.view_as_real(attr) if attr.is_complex() else attr
        with recording(builder):
            return builder.op.Constant(value=ir.tensor(tensor.detach().numpy()))

    # -- the main graph --------------------------------------------------------------

    def _initializer(self, name: str, tensor: torch.Tensor, *, weight: bool = False) -> ir.Value:
        # Weights are shared with the model, not copied (a model of S bytes must not need
        # 2 S of memory); buffers that forward mutates are cloned by the caller. Fake and
        # meta tensors become placeholders whose data comes at save time (model_state).
        if tensor.is_complex():
            tensor = torch.view_as_real(tensor)
        data = placeholder_or_tensor(name, tensor)
        value = ir.Value(
            name=name,
            shape=ir.Shape(list(data.shape.numpy())),
            type=ir.TensorType(data.dtype),
            const_value=data,
        )
        if weight or isinstance(data, WeightPlaceholder):
            value.meta[WEIGHT_KEY] = True
        self.graph.register_initializer(value)
        self._used_names.add(name)
        return value

    def _placeholders(self, input_names: Sequence[str]) -> dict[torch.fx.Node, Any]:
        program = self.program
        env: dict[torch.fx.Node, Any] = {}
        names = iter(input_names)
        placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
        mutated = {
            str(o.target)
            for o in program.graph_signature.output_specs
            if o.kind == OutputKind.BUFFER_MUTATION
        }
        for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True):
            val = node.meta.get("val")
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                target = str(spec.target)
                tensor = program.state_dict.get(target)
                if tensor is None:
                    tensor = program.constants[target]
                if target in mutated:  # forward changes it: keep its value at export time
                    tensor = tensor.detach().clone()
                # Parameters and persistent buffers (the state_dict) keep their names and
                # are never folded; non-persistent buffers and constants may be.
                weight = spec.kind == InputKind.PARAMETER or (
                    spec.kind == InputKind.BUFFER and bool(spec.persistent)
                )
                env[node] = self._initializer(target, tensor, weight=weight)
                if weight:  # saved with the tensor: `onnx-export info` counts these
                    env[node].const_value.metadata_props[WEIGHT_KEY] = spec.kind.name.lower()
            elif spec.kind == InputKind.USER_INPUT and isinstance(val, torch.Tensor):
                value = ir.Value(name=next(names))
                _set_type_and_shape(value, val, self.dim_names)
                value.meta[AXIS_RANGES_KEY] = axis_ranges(program, val)
                self.graph.inputs.append(value)
                self._used_names.add(str(value.name))
                env[node] = value
            elif spec.kind == InputKind.USER_INPUT and isinstance(val, torch.SymInt):
                low, high = int_range(program, val)
                if low is not None and low == high:  # the code fixes it: a constant
                    next(names)
                    env[node] = low
                else:
                    env[node] = self._int_input(next(names), (low, high))
            elif spec.kind == InputKind.USER_INPUT:
                env[node] = val  # Python constant (int, float, bool, str, None)
            else:
                raise NotImplementedError(f"graph input of kind {spec.kind.name}")
        return env

    def _int_input(self, name: str, bounds: tuple[int | None, int | None]) -> ir.Value:
        """A Python int marked dynamic: a 0-d INT64 graph input (the adapter passes the int)."""
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
        value.meta[PYTHON_INT_KEY] = name
        value.meta[INT_RANGE_KEY] = bounds
        self.graph.inputs.append(value)
        self._used_names.add(name)
        return value

    def _graph_output(self, raw: Any, seen: set[int]) -> ir.Value:
        value: ir.Value = raw if isinstance(raw, ir.Value) else self.builder.constant(raw)
        reused = value.is_graph_input() or value.is_initializer() or id(value) in seen
        if reused or value.const_value is not None:
            source = value
            value = self.builder._one("Identity", {}, source)
            value.type, value.shape = source.type, source.shape  # the adapter needs them
        seen.add(id(value))
        return value

    def _outputs(
        self, env: Mapping[torch.fx.Node, Any], output_names: Sequence[str] | None
    ) -> tuple[list[str], list[Any]]:
        output_node = next(n for n in reversed(self.program.graph.nodes) if n.op == "output")
        specs = self.program.graph_signature.output_specs
        dropped: list[str] = []
        user_args = []
        for arg, spec in zip(output_node.args[0], specs, strict=True):
            if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
                dropped.append(str(spec.target))
            elif spec.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT):
                user_args.append(arg)
            else:
                raise NotImplementedError(f"graph output of kind {spec.kind.name}")
        names = list(output_names or [])
        names += [""] * (len(user_args) - len(names))
        seen: set[int] = set()
        user_outputs: list[Any] = []
        for arg, name in zip(user_args, names, strict=True):
            value = self.convert(arg, env)
            if not isinstance(value, ir.Value):  # None or a Python constant: not a graph output
                user_outputs.append(value)
                continue
            output = self._graph_output(value, seen)
            if name:
                output.name = name
            meta = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            output.meta["complex"] = isinstance(meta, torch.Tensor) and meta.is_complex()
            self.graph.outputs.append(output)
            user_outputs.append(output)
        return dropped, user_outputs

    def run(
        self, input_names: Sequence[str], output_names: Sequence[str] | None
    ) -> tuple[list[str], list[Any]]:
        env = self._placeholders(input_names)
        calls = [n for n in self.program.graph.nodes if n.op == "call_function"]
        with translation_progress(len(calls)) as progress:
            for node in calls:
                self.builder.set_fx_node(node)
                try:
                    env[node] = self._call_function(node, env, self.builder, "")
                except NodeTranslationError:
                    raise
                except Exception as e:
                    decision = self.decisions.get(decision_key(node))
                    raise NodeTranslationError(node, decision, e) from e
                progress.advance()
        self.builder.set_fx_node(None)
        return self._outputs(env, output_names)


def translate(
    program: ExportedProgram,
    decisions: dict[str, Dispatch],
    *,
    input_names: Sequence[str],
    output_names: Sequence[str] | None = None,
    dim_names: Mapping[str, str] | None = None,
    opset_version: int = _PRODUCER_OPSET,
    target: str = "onnx",
) -> TranslationResult:
    """Translate ``program`` into an ONNX model (opset 18).

    ``decisions`` comes from :func:`find_unsupported`, which must have found nothing
    unsupported. ``opset_version`` is the opset the model is converted to afterwards:
    functions with a better op in a newer opset (``Attention`` at 23) emit it.
    ``target`` is ``ExportOptions.target`` (functions keep ONNX Runtime's fusion patterns).
    """
    translator = _Translator(program, decisions, dim_names or {})
    with targeting(opset_version, target):
        dropped, user_outputs = translator.run(input_names, output_names)
    model = ir.Model(translator.graph, ir_version=10, producer_name="onnx-export")
    return TranslationResult(model, decisions, dropped, user_outputs)
