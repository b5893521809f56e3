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

from onnx_export.passes._casts import cast_input, cast_output_back, every_node

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


def _widen(node: ir.Node) -> bool:
    value, output = node.inputs[0], node.outputs[0]
    if value is None or value.dtype not in _HALF or output.dtype != value.dtype:
        return False
    cast_input(node, 0, ir.DataType.FLOAT, "f32")
    cast_output_back(node, ir.DataType.FLOAT, "half", "f32")
    return True


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
    return sum(
        node.op_type in FLOAT32_OPS and node.domain == "" and _widen(node)
        for node in every_node(model)
    )
