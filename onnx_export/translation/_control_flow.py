"""torch's higher-order ops as ONNX control flow: ``If``, ``Loop``, ``Scan``.

Each higher-order op carries its bodies as FX subgraphs (``get_attr`` nodes of the owning
module). A body becomes an ONNX subgraph whose formal inputs are the values ONNX passes
per iteration; every other operand (``additional_inputs``, lifted weights) is referenced
from the enclosing graph, which ONNX subgraphs may do.

- ``cond`` -> ``If`` (any number of outputs, nested, weights in branches).
- ``while_loop`` -> ``Loop`` without a trip count: the condition body runs once before
  the loop and again at the end of each iteration (ONNX checks the condition that the
  previous iteration produced). Int carries are INT64 scalars.
- ``scan`` -> ``Scan`` (torch stacks along axis 0, as ``Scan`` does by default; torch
  flips ``xs`` itself for ``reverse=True``).
- ``map_impl`` (``torch._higher_order_ops.map``) -> ``Scan`` without states.
- ``invoke_subgraph`` (a ``torch.compiler.nested_compile_region`` called more than once)
  -> inlined at each call. Not an ONNX function: onnxscript's optimizer and ONNX Runtime
  inline functions anyway before running them, weights are initializers shared by every
  call either way (so a function would save only node protos, not weight bytes), and
  inlined calls keep each call's own source line in the node metadata and let constant
  folding and fusions see through the block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import onnx_ir as ir
import torch
import torch.fx

from onnx_export._dtypes import value_dtype
from onnx_export.translation._builder import TaggingGraphBuilder

__all__ = ["GraphTranslator", "HIGHER_ORDER_OPS", "PRODUCER_OPSET"]

PRODUCER_OPSET = 18  # the opset torchlib's functions are written for

Env = dict[torch.fx.Node, Any]


class GraphTranslator(Protocol):
    """What the control-flow translations need from the translator."""

    def convert(self, arg: Any, env: Mapping[torch.fx.Node, Any]) -> Any:
        """An FX argument as ONNX values (nodes looked up in ``env``)."""

    def inline(
        self,
        gm: torch.fx.GraphModule,
        inputs: Sequence[Any],
        builder: TaggingGraphBuilder,
        prefix: str,
    ) -> list[Any]:
        """Translate ``gm``'s nodes into ``builder`` with ``inputs``; return its outputs."""

    def name_outputs(self, node: torch.fx.Node, result: Any, prefix: str) -> None:
        """Name (and type) the ONNX values that ``node`` produced."""

    def set_type(self, value: ir.Value, val: object) -> None:
        """Give ``value`` the dtype and shape of an FX ``meta["val"]``."""


def _args(node: torch.fx.Node, count: int) -> list[Any]:
    """The first ``count`` arguments of a higher-order op (bodies, then operand lists)."""
    if len(node.args) < count:
        raise NotImplementedError(
            f"{node.target} with {len(node.args)} arguments (expected at least {count})"
        )
    return list(node.args[:count])


def _module(node: torch.fx.Node, arg: Any) -> torch.fx.GraphModule:
    gm = getattr(node.graph.owning_module, str(arg.target))
    if not isinstance(gm, torch.fx.GraphModule):
        raise NotImplementedError(f"{node.target} body {arg.target} is not a graph module")
    return gm


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _output_vals(gm: torch.fx.GraphModule) -> list[Any]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    args = output.args[0]
    args = args if isinstance(args, (list, tuple)) else [args]
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]


def _as_value(builder: TaggingGraphBuilder, value: Any, dtype: ir.DataType | None = None) -> Any:
    if isinstance(value, ir.Value):
        return value
    return builder.constant(value, dtype)


class _Body:
    """An ONNX subgraph being built for one body, with its own builder."""

    def __init__(self, tr: GraphTranslator, parent: TaggingGraphBuilder, scope: str) -> None:
        self.tr = tr
        self.scope = scope
        self.graph = ir.Graph(
            [], [], nodes=[], opset_imports={"": PRODUCER_OPSET}, name=scope.replace("/", "_")
        )
        self.builder = parent.child(self.graph, scope)

    def formal(self, name: str, val: object) -> ir.Value:
        value = ir.Value(name=f"{self.scope}/{name}")
        self.tr.set_type(value, val)
        self.graph.inputs.append(value)
        return value

    def scalar_formal(self, name: str, dtype: ir.DataType) -> ir.Value:
        value = ir.Value(name=f"{self.scope}/{name}", type=ir.TensorType(dtype), shape=ir.Shape([]))
        self.graph.inputs.append(value)
        return value

    def inline(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], label: str) -> list[Any]:
        return self.tr.inline(gm, inputs, self.builder, f"{self.scope}/{label}")

    def output(self, value: Any, val: object) -> None:
        source = _as_value(self.builder, value, value_dtype(val))
        result = self.builder.op.Identity(source)
        self.tr.set_type(result, val)
        if result.dtype is None:
            result.type = source.type
        self.graph.outputs.append(result)


def _results(node: torch.fx.Node, tr: GraphTranslator, result: Any, prefix: str) -> list[Any]:
    values = list(result) if isinstance(result, Sequence) else [result]
    tr.name_outputs(node, values, prefix)
    return values


def _cond(
    tr: GraphTranslator, node: torch.fx.Node, env: Env, builder: TaggingGraphBuilder, prefix: str
) -> list[Any]:
    pred, true_gm, false_gm, operands = _args(node, 4)
    inputs = [tr.convert(o, env) for o in operands]
    vals = node.meta.get("val")
    metas = list(vals) if isinstance(vals, (list, tuple)) else [vals]
    branches = []
    for label, attr in (("then", true_gm), ("else", false_gm)):
        body = _Body(tr, builder, f"{prefix}{node.name}_{label}")
        outputs = body.inline(_module(node, attr), inputs, "")
        for value, val in zip(outputs, metas, strict=True):
            body.output(value, val)
        branches.append(body.graph)
    condition = _as_value(builder, tr.convert(pred, env), ir.DataType.BOOL)
    result = builder.call_op(
        "If",
        [condition],
        {"then_branch": branches[0], "else_branch": branches[1]},
        version=PRODUCER_OPSET,
        outputs=len(metas),
    )
    return _results(node, tr, result, prefix)


def _while_loop(
    tr: GraphTranslator, node: torch.fx.Node, env: Env, builder: TaggingGraphBuilder, prefix: str
) -> list[Any]:
    cond_attr, body_attr, carried_args, additional_args = _args(node, 4)
    cond_gm, body_gm = _module(node, cond_attr), _module(node, body_attr)
    carried_metas = [p.meta.get("val") for p in _placeholders(body_gm)][: len(carried_args)]
    carried = [
        _as_value(builder, tr.convert(a, env), value_dtype(m))
        for a, m in zip(carried_args, carried_metas, strict=True)
    ]
    additional = [tr.convert(a, env) for a in additional_args]
    first = tr.inline(cond_gm, [*carried, *additional], builder, f"{prefix}{node.name}_cond0/")
    condition = _as_value(builder, first[0], ir.DataType.BOOL)
    body = _Body(tr, builder, f"{prefix}{node.name}_body")
    body.scalar_formal("iteration", ir.DataType.INT64)
    body.scalar_formal("condition", ir.DataType.BOOL)
    placeholders = _placeholders(body_gm)[: len(carried)]
    formals = [body.formal(p.name, m) for p, m in zip(placeholders, carried_metas, strict=True)]
    updated = body.inline(body_gm, [*formals, *additional], "")
    again = body.inline(cond_gm, [*updated, *additional], "cond/")
    body.output(again[0], torch.tensor(True))
    for value, val in zip(updated, _output_vals(body_gm), strict=True):
        body.output(value, val)
    result = builder.call_op(
        "Loop",
        [None, condition, *carried],
        {"body": body.graph},
        version=PRODUCER_OPSET,
        outputs=len(carried),
    )
    return _results(node, tr, result, prefix)


def _scan_op(
    tr: GraphTranslator,
    node: torch.fx.Node,
    builder: TaggingGraphBuilder,
    prefix: str,
    gm: torch.fx.GraphModule,
    states: Sequence[Any],
    scanned: Sequence[Any],
    additional: Sequence[Any],
) -> list[Any]:
    body = _Body(tr, builder, f"{prefix}{node.name}_body")
    placeholders = _placeholders(gm)[: len(states) + len(scanned)]
    formals = [body.formal(p.name, p.meta.get("val")) for p in placeholders]
    outputs = body.inline(gm, [*formals, *additional], "")
    for value, val in zip(outputs, _output_vals(gm), strict=True):
        body.output(value, val)
    result = builder.call_op(
        "Scan",
        [*states, *scanned],
        {"body": body.graph, "num_scan_inputs": len(scanned)},
        version=PRODUCER_OPSET,
        outputs=len(outputs),
    )
    return _results(node, tr, result, prefix)


def _scan(
    tr: GraphTranslator, node: torch.fx.Node, env: Env, builder: TaggingGraphBuilder, prefix: str
) -> list[Any]:
    combine_attr, init, xs, additional = _args(node, 4)
    return _scan_op(
        tr,
        node,
        builder,
        prefix,
        _module(node, combine_attr),
        [tr.convert(a, env) for a in init],
        [tr.convert(a, env) for a in xs],
        [tr.convert(a, env) for a in additional],
    )


def _map(
    tr: GraphTranslator, node: torch.fx.Node, env: Env, builder: TaggingGraphBuilder, prefix: str
) -> list[Any]:
    body_attr, xs, additional = _args(node, 3)
    scanned = [tr.convert(a, env) for a in xs]
    extra = [tr.convert(a, env) for a in additional]
    return _scan_op(tr, node, builder, prefix, _module(node, body_attr), [], scanned, extra)


def _invoke_subgraph(
    tr: GraphTranslator, node: torch.fx.Node, env: Env, builder: TaggingGraphBuilder, prefix: str
) -> list[Any]:
    body_attr, _identifier, *operands = node.args
    inputs = [tr.convert(o, env) for o in operands]
    return tr.inline(_module(node, body_attr), inputs, builder, f"{prefix}{node.name}/")


HigherOrderTranslation = Callable[
    [GraphTranslator, torch.fx.Node, Env, TaggingGraphBuilder, str], list[Any]
]

#: The translation of each supported higher-order op, by its name.
HIGHER_ORDER_OPS: dict[str, HigherOrderTranslation] = {
    "cond": _cond,
    "while_loop": _while_loop,
    "scan": _scan,
    "map_impl": _map,
    "invoke_subgraph": _invoke_subgraph,
}
