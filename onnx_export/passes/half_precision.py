"""Half-precision graphs: softmax and reductions computed in float32 (``ExportOptions.dtype``).

torch's kernels for ``softmax``, ``log_softmax``, ``sum``, ``mean``, ``cumsum``... on float16
and bfloat16 tensors accumulate in float32 and round once at the end. ONNX's ops on float16
tensors leave the accumulator to the kernel (ONNX Runtime's CPU provider has none for most
of them, its CUDA kernels differ by op). This pass makes the float32 computation explicit:
the op's data input is cast to ``FLOAT`` and its result back to the half dtype, so every
runtime computes what torch does. ``LayerNormalization`` is left alone: its ``stash_type``
(1, float32, by default) already says so. Subgraphs and functions are included.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["FLOAT32_OPS", "compute_in_float32"]

#: The standard ops whose half-precision data input (input 0) is computed in float32.
FLOAT32_OPS = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "ReduceMean",
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceProd",
        "CumSum",
    }
)

_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _name(node: ir.Node, suffix: str) -> str | None:
    return f"{node.name}_{suffix}" if node.name else None  # unique as the node's name is


def _widen(graph: ir.Graph, node: ir.Node) -> bool:
    value, output = node.inputs[0], node.outputs[0]
    if value is None or value.dtype not in _HALF or output.dtype != value.dtype:
        return False
    half = value.dtype
    to_float = {"to": int(ir.DataType.FLOAT)}
    up = ir.node("Cast", [value], attributes=to_float, name=_name(node, "f32"))
    up.outputs[0].dtype, up.outputs[0].shape = ir.DataType.FLOAT, value.shape
    graph.insert_before(node, up)
    node.replace_input_with(0, up.outputs[0])
    uses = list(output.uses())
    down = ir.node("Cast", [output], attributes={"to": int(half)}, name=_name(node, "half"))
    narrow = down.outputs[0]
    for use in uses:
        use.node.replace_input_with(use.idx, narrow)
    for index, graph_output in enumerate(graph.outputs):
        if graph_output is output:
            graph.outputs[index] = narrow
    name = output.name
    output.name = f"{name}_f32" if name else None
    narrow.name = name
    narrow.dtype, narrow.shape = half, output.shape
    output.dtype = ir.DataType.FLOAT
    graph.insert_after(node, down)
    return True


def _in_graph(graph: ir.Graph) -> int:
    changed = 0
    for node in list(graph):
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                changed += _in_graph(attribute.as_graph())
            elif attribute.type == ir.AttributeType.GRAPHS:
                for subgraph in attribute.as_graphs():
                    changed += _in_graph(subgraph)
        if node.domain == "" and node.op_type in FLOAT32_OPS and _widen(graph, node):
            changed += 1
    return changed


def compute_in_float32(model: ir.Model) -> int:
    """Wrap each half-precision op of :data:`FLOAT32_OPS` in Casts to float32 and back.

    Returns:
        How many ops now compute in float32.

    Example:
        >>> x = ir.val("x", ir.DataType.FLOAT16, ir.Shape([2, 3]))
        >>> node = ir.node("Softmax", [x], name="softmax")
        >>> node.outputs[0].dtype = ir.DataType.FLOAT16
        >>> node.outputs[0].name = "y"
        >>> graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 20})
        >>> compute_in_float32(ir.Model(graph, ir_version=10))
        1
        >>> [n.op_type for n in graph]
        ['Cast', 'Softmax', 'Cast']
    """
    changed = _in_graph(model.graph)
    for function in model.functions.values():
        changed += _in_graph(function.graph)
    return changed
