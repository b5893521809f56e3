"""ONNX Runtime's fused kernels (``com.microsoft`` ops) for ``ExportOptions(target="onnxruntime")``.

onnxscript's ``ort_fusions`` rewrites attention (``Attention``, ``MultiHeadAttention``,
``GroupQueryAttention``), rotary embeddings, skip and simplified layer norms and bias-GELU
into the contrib ops ONNX Runtime runs on its CPU and CUDA providers. The weights are
shielded as in the optimizer (nothing reads, folds or copies them). ``Gemm`` nodes become
``MatMul`` + ``Add`` first: a fusion may remove the ``Reshape`` that made a Gemm's input
2-D (GPT-2's ``Conv1D`` after attention), and MatMul takes any rank. Decoders exported with
``GroupQueryAttention`` (``hf/export/_fused_decoder.py``) then lose the reshapes around it and
get one packed Q/K/V MatMul (``passes/ort_gqa.py``).
"""

from __future__ import annotations

import contextlib
import io
import logging

import numpy as np
import onnx_ir as ir

from onnx_export.passes.fold_weights import derived_initializer
from onnx_export.passes.optimize import weights_shielded
from onnx_export.passes.ort_gqa import lean_group_query_attention

__all__ = ["fuse_for_onnxruntime"]


def _transposed(graph: ir.Graph, gemm: ir.Node, value: ir.Value) -> ir.Value:
    """``value`` transposed: a lazily folded initializer if it is constant, else a node."""
    shape = value.shape
    if value.const_value is not None and value.dtype is not None and shape is not None:
        dims = tuple(int(d) for d in value.const_value.shape.numpy())
        return derived_initializer(
            graph,
            f"{value.name}.T",
            [value],
            lambda arrays: np.transpose(np.asarray(arrays[0])),
            value.dtype,
            dims[::-1],
        )
    node = ir.node("Transpose", [value], attributes={"perm": [1, 0]})
    graph.insert_before(gemm, node)
    return node.outputs[0]


def _gemm_as_matmul(graph: ir.Graph, gemm: ir.Node) -> bool:
    """Replace ``gemm`` by MatMul (+ Add), which take inputs of any rank."""
    a, b = gemm.inputs[0], gemm.inputs[1]
    c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    attrs = gemm.attributes
    if a is None or b is None:
        return False
    if attrs.get_int("transA", 0) or attrs.get_float("alpha", 1.0) != 1.0:
        return False
    if attrs.get_float("beta", 1.0) != 1.0:
        return False
    if attrs.get_int("transB", 0):
        b = _transposed(graph, gemm, b)
    matmul = ir.node("MatMul", [a, b])
    graph.insert_before(gemm, matmul)
    result = matmul.outputs[0]
    if c is not None:
        add = ir.node("Add", [result, c])
        graph.insert_before(gemm, add)
        result = add.outputs[0]
    old = gemm.outputs[0]
    result.shape, result.type = old.shape, old.type
    if old.is_graph_output():
        result.name, old.name = old.name, None
    ir.convenience.replace_all_uses_with(old, result, replace_graph_outputs=True)
    graph.remove(gemm, safe=True)
    return True


#: Fused norms whose outputs after the first are statistics (or the sum) nothing may read.
_NORMS = {
    "SkipSimplifiedLayerNormalization": (1, 2),
    "SkipLayerNormalization": (1, 2),
    "SimplifiedLayerNormalization": (1,),
    "LayerNormalization": (1, 2),
}


def _drop_unread_statistics(graph: ir.Graph) -> int:
    """Optional norm outputs (mean, inverse std) that nothing reads are left out.

    The kernel then does not write them: one (batch, sequence) buffer less per norm.
    """
    dropped = 0
    for node in graph:
        for index in _NORMS.get(node.op_type, ()):
            if index >= len(node.outputs):
                continue
            value = node.outputs[index]
            if value.name and not value.uses() and not value.is_graph_output():
                value.name = ""  # an empty name: the optional output is absent
                dropped += 1
    return dropped


def fuse_for_onnxruntime(model: ir.Model) -> dict[str, int]:
    """Apply ONNX Runtime's fusions in place; return how often each one applied."""
    from onnxscript.rewriter import ort_fusions

    # A fusion may drop the Reshape that made a Gemm's input 2-D (GPT-2's Conv1D after
    # attention): as MatMul + Add, the rank does not matter (ONNX Runtime fuses them back).
    for node in list(model.graph):
        if node.op_type == "Gemm" and node.domain in ("", "ai.onnx"):
            _gemm_as_matmul(model.graph, node)
    quiet = logging.getLogger("onnxscript")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        # Constant folding inside the fusions prints failed evaluations to stdout.
        with weights_shielded(model.graph), contextlib.redirect_stdout(io.StringIO()):
            _, counts = ort_fusions.optimize_for_ort(model)
    finally:
        quiet.setLevel(level)
    counts.update(lean_group_query_attention(model))
    counts["unread norm statistics dropped"] = _drop_unread_statistics(model.graph)
    applied = {name: count for name, count in counts.items() if count}
    graph = model.graph
    for value in list(graph.initializers.values()):
        if not value.uses() and not value.is_graph_output():
            graph.initializers.pop(str(value.name))  # a weight stays reachable if folded
    return applied
