"""Bool data through ops that ONNX allows on bools but ONNX Runtime has no kernel for.

``Where`` with bool branches (``mask.masked_fill(cond, False)``), ``Max``/``Min``/``Clip`` of bools
(``clamp`` of a bool tensor) are valid ONNX, yet ONNX Runtime refuses to load them
("Could not find an implementation for Where(16)"). Their bool data inputs are cast to
``INT32`` and the result back to ``BOOL``, which is exact. Linear in the number of nodes;
subgraphs included.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["legalize_bool_data"]

#: op type -> the input positions that carry data (``Where``'s condition stays bool).
_BOOL_DATA_INPUTS: dict[str, slice] = {
    "Where": slice(1, 3),
    "Max": slice(None),
    "Min": slice(None),
    "Clip": slice(None),
}


def _is_bool(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == ir.DataType.BOOL


def _name(node: ir.Node, suffix: str) -> str | None:
    return f"{node.name}_{suffix}" if node.name else None  # unique as the node's name is


def _cast(graph: ir.Graph, node: ir.Node, index: int, to: ir.DataType) -> ir.Value:
    value = node.inputs[index]
    assert value is not None
    cast = ir.node("Cast", [value], attributes={"to": int(to)}, name=_name(node, f"cast_{index}"))
    cast.outputs[0].dtype = to
    cast.outputs[0].shape = value.shape
    graph.insert_before(node, cast)
    return cast.outputs[0]


def _legalize(graph: ir.Graph) -> int:
    changed = 0
    for node in list(graph):
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                changed += _legalize(attribute.as_graph())
            elif attribute.type == ir.AttributeType.GRAPHS:
                for subgraph in attribute.as_graphs():
                    changed += _legalize(subgraph)
        positions = _BOOL_DATA_INPUTS.get(node.op_type) if node.domain == "" else None
        if positions is None or not _is_bool(node.outputs[0]):
            continue
        data = [i for i in range(len(node.inputs))[positions] if _is_bool(node.inputs[i])]
        if not data:
            continue
        for i in data:
            node.replace_input_with(i, _cast(graph, node, i, ir.DataType.INT32))
        output = node.outputs[0]
        uses = list(output.uses())
        back = ir.node(
            "Cast", [output], attributes={"to": int(ir.DataType.BOOL)}, name=_name(node, "to_bool")
        )
        boolean = back.outputs[0]
        for use in uses:
            use.node.replace_input_with(use.idx, boolean)
        for index, graph_output in enumerate(graph.outputs):
            if graph_output is output:
                graph.outputs[index] = boolean
        name = output.name
        output.name = f"{name}_int32"
        boolean.name = name
        boolean.dtype, boolean.shape = ir.DataType.BOOL, output.shape
        output.dtype = ir.DataType.INT32
        graph.insert_after(node, back)
        changed += 1
    return changed


def legalize_bool_data(model: ir.Model) -> int:
    """Route bool data around ``Where``/``Max``/``Min``/``Clip`` through INT32; return the count."""
    changed = _legalize(model.graph)
    for function in model.functions.values():
        changed += _legalize(function.graph)
    return changed
