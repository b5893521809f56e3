"""GELU as one ``Gelu`` node where the opset has it (20 and later).

Torchlib writes ``aten::gelu`` for opset 18, as ``x * (0.5 * (Erf(x / sqrt(2)) + 1))``:
five nodes, and its tanh approximation (``approximate="tanh"``: Gemma, GPT-2's
``gelu_new``) as ``x * (0.5 * (Tanh(sqrt(2/pi) * (x + 0.044715 * x**3)) + 1))``: eight.
ONNX opset 20 added ``Gelu`` (``approximate="none"`` or ``"tanh"``), which ONNX Runtime
runs as one kernel; torch.onnx emits it for both (#22).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

__all__ = ["fuse_gelu"]

_GELU_OPSET = 20


def _scalar(value: ir.Value | None) -> float | None:
    tensor = value.const_value if value is not None else None
    if tensor is None or tensor.size != 1:
        return None
    return float(np.asarray(tensor.numpy()).reshape(()))


def _single_user(value: ir.Value, op_type: str) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    node = uses[0].node
    return node if node.op_type == op_type and node.domain in ("", "ai.onnx") else None


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The input of a binary ``node`` that is not ``value``."""
    a, b = node.inputs[0], node.inputs[1]
    return b if a is value else a if b is value else None


def _close(found: float | None, want: float) -> bool:
    return found is not None and abs(found - want) <= 1e-3 * abs(want)


def _operand(node: ir.Node, want: float) -> ir.Value | None:
    """The other input of a binary ``node`` whose one input is the scalar ``want``."""
    a, b = node.inputs[0], node.inputs[1]
    if _close(_scalar(b), want):
        return a
    return b if _close(_scalar(a), want) else None


def _single_use(value: ir.Value | None) -> bool:
    return value is not None and len(value.uses()) == 1 and not value.is_graph_output()


def _producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    node = value.producer() if _single_use(value) and value is not None else None
    return node if node is not None and node.op_type == op_type else None


def _tail(inner: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Node] | None:
    """``(x, nodes, final Mul)`` for ``x * (0.5 * (inner + 1))`` or ``(0.5 * x) * (inner + 1)``."""
    add = _single_user(inner.outputs[0], "Add")
    if add is None or not _close(_scalar(_other(add, inner.outputs[0])), 1.0):
        return None
    final = _single_user(add.outputs[0], "Mul")
    other = _other(final, add.outputs[0]) if final is not None else None
    half = _producer(other, "Mul")
    x = _operand(half, 0.5) if half is not None else None
    if final is not None and half is not None and x is not None:
        return x, [half, add], final
    half = final
    if half is None or not _close(_scalar(_other(half, add.outputs[0])), 0.5):
        return None
    final = _single_user(half.outputs[0], "Mul")
    x = _other(final, half.outputs[0]) if final is not None else None
    return (x, [add, half], final) if x is not None and final is not None else None


def _match(erf: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Node] | None:
    """``(x, nodes to remove, final Mul)`` for the chain around ``erf``, or None."""
    scale = erf.inputs[0].producer() if erf.inputs[0] is not None else None
    if scale is None or scale.op_type not in ("Div", "Mul") or scale.inputs[0] is None:
        return None
    x = scale.inputs[0]
    want = math.sqrt(2.0) if scale.op_type == "Div" else 1.0 / math.sqrt(2.0)
    if not _close(_scalar(scale.inputs[1]), want) or len(scale.outputs[0].uses()) != 1:
        return None
    tail = _tail(erf)
    if tail is None or tail[0] is not x:
        return None
    return x, [scale, erf, *tail[1]], tail[2]


def _match_tanh(tanh: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Node] | None:
    """``(x, nodes to remove, final Mul)`` for the tanh-GELU chain around ``tanh``, or None."""
    scale = _producer(tanh.inputs[0], "Mul")  # sqrt(2/pi) * (x + 0.044715 * x**3)
    inner = _operand(scale, math.sqrt(2.0 / math.pi)) if scale is not None else None
    add = _producer(inner, "Add")
    if add is None:
        return None
    for x, term in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        cubic = _producer(term, "Mul")
        cubed = _operand(cubic, 0.044715) if cubic is not None else None
        power = _producer(cubed, "Pow")
        if power is None or power.inputs[0] is not x or not _close(_scalar(power.inputs[1]), 3):
            continue
        tail = _tail(tanh)
        if tail is None or tail[0] is not x or x is None:
            return None
        assert cubic is not None and scale is not None  # found above
        return x, [power, cubic, add, scale, tanh, *tail[1]], tail[2]
    return None


def _replace(
    graph: ir.Graph, found: tuple[ir.Value, list[ir.Node], ir.Node], approximate: str
) -> None:
    """Put one ``Gelu`` in place of the chain ``found`` (its input, nodes, final Mul)."""
    x, chain, final = found
    attributes = {"approximate": approximate} if approximate != "none" else {}
    gelu = ir.node("Gelu", [x], attributes, outputs=[ir.Value(name=None)], metadata_props={})
    out = gelu.outputs[0]
    out.shape, out.type = final.outputs[0].shape, final.outputs[0].type
    graph.insert_before(final, gelu)
    gelu.metadata_props.update(final.metadata_props)
    gelu.meta.update(final.meta)
    if final.outputs[0].is_graph_output():  # the model's output keeps its name
        out.name, final.outputs[0].name = final.outputs[0].name, None
    ir.convenience.replace_all_uses_with(final.outputs[0], out, replace_graph_outputs=True)
    constants = [v for n in (*chain, final) for v in n.inputs if v is not None]
    graph.remove([final, *reversed(chain)], safe=True)
    for value in constants:  # the chain's scalars (1/sqrt(2), 1, 0.5, ...)
        unused = not value.uses() and not value.is_graph_output()
        if unused and graph.initializers.get(str(value.name)) is value:
            graph.initializers.pop(str(value.name))


_MATCHERS = {"Erf": (_match, "none"), "Tanh": (_match_tanh, "tanh")}


def fuse_gelu(model: ir.Model) -> int:
    """Replace each exact or tanh-approximated GELU chain by ``Gelu`` (opset 20+).

    Returns how many chains became one node.
    """
    graph = model.graph
    if graph.opset_imports.get("", 0) < _GELU_OPSET:
        return 0
    fused = 0
    for node in list(graph):
        matcher = _MATCHERS.get(node.op_type)
        if matcher is None or node.domain not in ("", "ai.onnx") or node.graph is not graph:
            continue
        found = matcher[0](node)
        if found is not None:
            _replace(graph, found, matcher[1])
            fused += 1
    return fused
