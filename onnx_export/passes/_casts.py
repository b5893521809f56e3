"""Casts around one node: the shared step of the passes that compute an op in another dtype.

:mod:`~onnx_export.passes.half_precision` (half-precision reductions in float32) and
:mod:`~onnx_export.passes.legalize` (bool data through INT32) both cast some inputs of a
node to a wider dtype, run the node there, and cast its result back, so that the rest of
the graph, the graph's outputs included, sees the value under its old name and dtype.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

__all__ = ["every_node", "cast_input", "cast_output_back"]


def every_node(model: ir.Model) -> Iterator[ir.Node]:
    """Every node of the model, its functions' and every subgraph's, listed before any edit."""
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    nodes = [node for graph in graphs for node in ir.traversal.RecursiveGraphIterator(graph)]
    return iter(nodes)


def _name(node: ir.Node, suffix: str) -> str | None:
    return f"{node.name}_{suffix}" if node.name else None  # unique as the node's name is


def cast_input(node: ir.Node, index: int, to: ir.DataType, suffix: str) -> None:
    """Feed ``node``'s input ``index`` through a new ``Cast`` to ``to``, placed before it."""
    graph, value = node.graph, node.inputs[index]
    assert graph is not None and value is not None
    cast = ir.node("Cast", [value], attributes={"to": int(to)}, name=_name(node, suffix))
    cast.outputs[0].dtype, cast.outputs[0].shape = to, value.shape
    graph.insert_before(node, cast)
    node.replace_input_with(index, cast.outputs[0])


def cast_output_back(node: ir.Node, inner: ir.DataType, suffix: str, tag: str) -> None:
    """Make ``node``'s output 0 ``inner`` and cast it back to its dtype for every consumer.

    The cast's result takes the output's name (and its place among the graph's outputs);
    the node's own output is renamed ``<name>_<tag>``.
    """
    graph, output = node.graph, node.outputs[0]
    assert graph is not None
    outer = output.dtype
    assert outer is not None
    uses = list(output.uses())
    back = ir.node("Cast", [output], attributes={"to": int(outer)}, name=_name(node, suffix))
    result = back.outputs[0]
    for use in uses:
        use.node.replace_input_with(use.idx, result)
    for index, graph_output in enumerate(graph.outputs):
        if graph_output is output:
            graph.outputs[index] = result
    name = output.name
    output.name = f"{name}_{tag}" if name else None
    result.name = name
    result.dtype, result.shape = outer, output.shape
    output.dtype = inner
    graph.insert_after(node, back)
