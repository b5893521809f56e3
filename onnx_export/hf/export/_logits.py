"""The default decoder's ``num_logits_to_keep``: the output head on the last k positions.

A decoder exported with the default target returns the logits of every position, which a
prompt's prefill does not need: with vocabularies of 32k-150k the head (one MatMul per
position) is a fifth or more of a short prompt's work, and its output (positions x vocab
floats) is copied out. :func:`keep_last_logits` puts a ``Slice`` of the last k positions
before the head's ``MatMul``. k is ``num_logits_to_keep``, a (1,) int64 graph input with an
initializer of value 0 (an ONNX Runtime overridable initializer): a run that does not feed
it gets every position's logits as before (0 keeps all, as transformers'
``logits_to_keep=0``); a prefill feeds 1 and gets (batch, 1, vocab). The rows of a batch
are left-padded, so their last positions are the last columns. The fused
``target="onnxruntime"`` decoder has the same input with a default of 1
(``passes/ort_gqa.py``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

__all__ = ["LOGITS_TO_KEEP", "keep_last_logits"]

#: The input's name, the fused decoder's too (and transformers' ``logits_to_keep``).
LOGITS_TO_KEEP = "num_logits_to_keep"


def _head(graph: ir.Graph) -> ir.Node | None:
    """The ``MatMul`` writing the ``logits`` output of a decoder with a cache, or None."""
    outputs = [v for v in graph.outputs if v.name == "logits"]
    if len(outputs) != 1 or not any(
        str(v.name).startswith("past_key_values.") for v in graph.inputs
    ):
        return None
    node = outputs[0].producer()
    if node is None or node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
        return None
    hidden = node.inputs[0]
    if hidden is None or hidden.shape is None or len(hidden.shape) != 3:
        return None
    return node


def keep_last_logits(model: ir.Model) -> bool:
    """Add ``num_logits_to_keep`` (default 0: every position) before the head; True if added.

    Nothing changes for a graph without a ``logits`` output written by a ``MatMul`` of 3-D
    hidden states, or one that already has the input.
    """
    graph = model.graph
    head = _head(graph)
    if head is None or LOGITS_TO_KEEP in graph.initializers:
        return False
    if any(v.name == LOGITS_TO_KEEP for v in graph.inputs):
        return False
    keep = ir.Value(name=LOGITS_TO_KEEP, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
    keep.const_value = ir.tensor(np.array([0], np.int64), name=LOGITS_TO_KEEP)
    graph.inputs.append(keep)
    graph.register_initializer(keep)

    def add(op_type: str, *inputs: ir.Value) -> ir.Value:
        node = ir.node(op_type, list(inputs))
        graph.insert_before(head, node)
        return node.outputs[0]

    def constant(values: list[int]) -> ir.Value:
        node = ir.node("Constant", [], attributes={"value": ir.tensor(np.array(values, np.int64))})
        graph.insert_before(head, node)
        return node.outputs[0]

    hidden = head.inputs[0]
    assert hidden is not None  # _head checked it
    # Slice starts at -k (0 for k = 0: every position) and runs to the end of axis 1.
    last = add("Slice", hidden, add("Neg", keep), constant([np.iinfo(np.int64).max]), constant([1]))
    if hidden.shape is not None:
        dims = list(hidden.shape)
        last.shape = ir.Shape([dims[0], ir.SymbolicDim(LOGITS_TO_KEEP), dims[2]])
    last.type = hidden.type
    head.replace_input_with(0, last)
    return True
