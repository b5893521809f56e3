"""The exact GELU as one ``Gelu`` node where the opset has it (20 and later).

Torchlib writes ``aten::gelu`` for opset 18, as ``x * (0.5 * (Erf(x / sqrt(2)) + 1))``:
five nodes. ONNX opset 20 added ``Gelu``, which ONNX Runtime runs as one kernel.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

__all__ = ["fuse_erf_gelu"]

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


def _match(erf: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Node] | None:
    """``(x, nodes to remove, final Mul)`` for the chain around ``erf``, or None."""
    scale = erf.inputs[0].producer() if erf.inputs[0] is not None else None
    if scale is None or scale.op_type not in ("Div", "Mul") or scale.inputs[0] is None:
        return None
    x = scale.inputs[0]
    want = math.sqrt(2.0) if scale.op_type == "Div" else 1.0 / math.sqrt(2.0)
    if not _close(_scalar(scale.inputs[1]), want) or len(scale.outputs[0].uses()) != 1:
        return None
    add = _single_user(erf.outputs[0], "Add")
    if add is None or not _close(_scalar(_other(add, erf.outputs[0])), 1.0):
        return None
    half = _single_user(add.outputs[0], "Mul")
    if half is None or not _close(_scalar(_other(half, add.outputs[0])), 0.5):
        return None
    final = _single_user(half.outputs[0], "Mul")
    if final is None or _other(final, half.outputs[0]) is not x:
        return None
    return x, [scale, erf, add, half], final


def fuse_erf_gelu(model: ir.Model) -> int:
    """Replace each exact-GELU chain by ``Gelu`` (opset 20+); return how many."""
    graph = model.graph
    if graph.opset_imports.get("", 0) < _GELU_OPSET:
        return 0
    fused = 0
    for node in list(graph):
        if node.op_type != "Erf" or node.domain not in ("", "ai.onnx"):
            continue
        found = _match(node)
        if found is None:
            continue
        x, chain, final = found
        gelu = ir.node("Gelu", [x], outputs=[ir.Value(name=None)], metadata_props={})
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
        for value in constants:  # the chain's 1/sqrt(2), 1 and 0.5
            unused = not value.uses() and not value.is_graph_output()
            if unused and graph.initializers.get(str(value.name)) is value:
                graph.initializers.pop(str(value.name))
        fused += 1
    return fused
