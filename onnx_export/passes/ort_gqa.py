"""``GroupQueryAttention`` made lean: no reshapes around it, one packed Q/K/V MatMul.

After the export, each GQA node (``hf/export/_gqa.py``) reads its query, key and value through
the reshapes that split and merged the heads (``(batch, seq, heads * size)`` -> ``(batch,
seq, heads, size)`` -> back), and writes its output through two more. A chain of
``Reshape`` nodes whose last shape is its first input's shape (all dimensions known,
symbolic ones by name) is that input: the chains are dropped. Then, when the query, key
and value are three ``MatMul`` of one activation by constant weights, they become one
MatMul by the weights concatenated (a lazily computed initializer, so
``save(model_state=...)`` still recomputes it from the named weights) and GQA takes the
packed ``(batch, seq, (heads + 2 * kv heads) * size)`` as its query, without key and
value. A symbolic size's trip from a one-element ``Shape`` to a scalar (``Squeeze``)
and back (``Reshape`` to ``[1]``) is dropped too.
Repeated shape computations (each layer's ``seqlens_k``) are merged by common
subexpression elimination.

When every past key/value the graph takes goes to one GQA only, and that GQA's presents are
graph outputs, the model is marked ``onnx_export.past_present_share_buffer = "1"``
(:data:`SHARE_BUFFER_KEY`): a runtime may then bind each past and its present to one
preallocated (batch, kv heads, max length, head size) buffer that GQA updates in place
(ORT's shared past/present buffer; ``seqlens_k`` says how much of it is filled).

The head's input (each row's last token, a ``GatherND`` that ``hf/export/_gqa.py`` marks)
takes each row's last ``num_logits_to_keep`` positions (:func:`keep_last_logits`), an
input of default 1, so a runtime can verify k speculative drafts in one step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.passes.fold_weights import derived_initializer

__all__ = [
    "LAST_TOKEN_ROWS_KEY",
    "LOGITS_TO_KEEP",
    "SHARE_BUFFER_KEY",
    "UNREAD_INPUTS_KEY",
    "keep_last_logits",
    "lean_group_query_attention",
    "shares_past_present",
]

#: Model metadata key set to ``"1"`` when the pasts and presents can share one buffer.
SHARE_BUFFER_KEY = "onnx_export.past_present_share_buffer"
#: Model metadata key: the graph inputs nothing reads, comma-separated (``position_ids``
#: when GQA rotates at the physical positions); a runtime need not refresh them per step.
UNREAD_INPUTS_KEY = "onnx_export.unread_inputs"
#: Node metadata marking the ``GatherND`` that picks each row's last token for the output
#: head (``hf/export/_gqa.py``'s ``last_token_rows``).
LAST_TOKEN_ROWS_KEY = "onnx_export.last_token_rows"
#: The graph input saying how many of each row's last positions ``logits`` holds (1 unless
#: fed; :func:`keep_last_logits`): speculative decoding verifies its drafts with it.
LOGITS_TO_KEEP = "num_logits_to_keep"


def _same_shape(a: ir.Value, b: ir.Value) -> bool:
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    for x, y in zip(a.shape, b.shape, strict=True):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif isinstance(x, ir.SymbolicDim) and isinstance(y, ir.SymbolicDim):
            if x.value is None or x.value != y.value:
                return False
        else:
            return False
    return True


def _chain_root(value: ir.Value) -> ir.Value:
    """The first input of the ``Reshape`` chain that ends at ``value`` (``value`` if none)."""
    root = value
    while (node := root.producer()) is not None and node.op_type == "Reshape":
        if node.domain not in ("", "ai.onnx") or node.inputs[0] is None:
            break
        root = node.inputs[0]
    return root


def _drop_reshape_chains(graph: ir.Graph) -> int:
    """Uses of a shape-preserving Reshape chain's end read its start instead."""
    dropped = 0
    for node in list(graph):
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        end = node.outputs[0]
        root = _chain_root(end)
        if root is end or end.is_graph_output() or not _same_shape(root, end):
            continue
        ir.convenience.replace_all_uses_with(end, root)
        dropped += 1
    return dropped


def _is_one_element_vector(value: ir.Value | None) -> bool:
    """A value of shape ``[1]``: so typed, or a ``Shape`` of one dimension."""
    if value is None:
        return False
    if value.shape is not None:
        return list(value.shape) == [1]
    node = value.producer()
    if node is None or node.op_type != "Shape" or node.domain not in ("", "ai.onnx"):
        return False
    start, end = node.attributes.get("start"), node.attributes.get("end")
    if start is None or end is None:
        return False
    first, last = start.as_int(), end.as_int()
    return first >= 0 and last == first + 1


def _drop_squeeze_round_trips(graph: ir.Graph) -> int:
    """``Reshape(Squeeze(x), [1])`` of a one-element vector ``x`` reads ``x`` itself.

    That is a symbolic size's trip from ``Shape`` to a scalar and back, for a ``Concat``.
    """
    dropped = 0
    for node in list(graph):
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or None in node.inputs:
            continue
        squeeze, target = node.inputs[0].producer(), node.inputs[1]  # type: ignore[union-attr]
        if squeeze is None or squeeze.op_type != "Squeeze" or squeeze.domain not in ("", "ai.onnx"):
            continue
        source = squeeze.inputs[0]
        wanted = ir.convenience.get_const_tensor(target)  # type: ignore[arg-type]
        if wanted is None or wanted.numpy().tolist() not in ([1], [-1]):
            continue
        if not _is_one_element_vector(source) or node.outputs[0].is_graph_output():
            continue
        ir.convenience.replace_all_uses_with(node.outputs[0], source)  # type: ignore[arg-type]
        dropped += 1
    return dropped


def _weight(node: ir.Node) -> ir.Value | None:
    """The constant 2-D right-hand side of a MatMul, if it is one."""
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    weight = node.inputs[1]
    if weight is None or weight.const_value is None or weight.shape is None:
        return None
    return weight if len(weight.shape) == 2 else None


def _pack_qkv(graph: ir.Graph, gqa: ir.Node) -> bool:
    """GQA's query/key/value from three MatMuls of one input -> one packed MatMul."""
    if len(gqa.inputs) < 3 or any(v is None for v in gqa.inputs[:3]):
        return False
    producers = [v.producer() for v in gqa.inputs[:3]]  # type: ignore[union-attr]
    if any(p is None for p in producers):
        return False
    weights = [_weight(p) for p in producers]  # type: ignore[arg-type]
    inputs = {id(p.inputs[0]) for p in producers}  # type: ignore[union-attr]
    if any(w is None for w in weights) or len(inputs) != 1:
        return False
    if any(len(v.uses()) != 1 for v in gqa.inputs[:3]):  # type: ignore[union-attr]
        return False
    shapes = [w.const_value.shape.numpy() for w in weights]  # type: ignore[union-attr]
    dtype = weights[0].dtype  # type: ignore[union-attr]
    if len({s[0] for s in shapes}) != 1 or dtype is None:
        return False
    names = [str(w.name) for w in weights]  # type: ignore[union-attr]
    packed = derived_initializer(
        graph,
        f"{names[0]}.packed_qkv",
        list(weights),
        lambda arrays: np.concatenate([np.asarray(a) for a in arrays], axis=1),
        dtype,
        (shapes[0][0], sum(s[1] for s in shapes)),
    )
    activation = producers[0].inputs[0]  # type: ignore[union-attr]
    matmul = ir.node("MatMul", [activation, packed])
    graph.insert_before(gqa, matmul)
    gqa.replace_input_with(0, matmul.outputs[0])
    gqa.replace_input_with(1, None)
    gqa.replace_input_with(2, None)
    for producer in producers:
        graph.remove(producer, safe=True)  # type: ignore[arg-type]
    return True


def shares_past_present(graph: ir.Graph) -> bool:
    """Whether each cache input is one GQA's past key/value, whose present is an output.

    Then a past and its present can be one buffer: nothing else reads the past, and the
    present leaves the graph unchanged.
    """
    pasts = 0
    for value in graph.inputs:
        uses = list(value.uses())
        if not any(u.node.op_type == "GroupQueryAttention" for u in uses):
            continue
        if len(uses) != 1 or uses[0].idx not in (3, 4):
            return False
        node, slot = uses[0].node, uses[0].idx
        if node.domain != "com.microsoft" or not node.outputs[slot - 2].is_graph_output():
            return False
        pasts += 1
    return pasts > 0


def _downstream(value: ir.Value) -> list[ir.Value]:
    """The values computed from ``value`` (itself included), in the graph's order."""
    seen, stack, found = {id(value)}, [value], [value]
    while stack:
        for use in stack.pop().uses():
            for out in use.node.outputs:
                if id(out) not in seen:
                    seen.add(id(out))
                    stack.append(out)
                    found.append(out)
    return found


def _constant(graph: ir.Graph, before: ir.Node, array: Any) -> ir.Value:
    node = ir.node("Constant", [], attributes={"value": ir.tensor(np.asarray(array, np.int64))})
    graph.insert_before(before, node)
    return node.outputs[0]


def keep_last_logits(graph: ir.Graph) -> bool:
    """The last-token ``GatherND`` takes each row's last ``num_logits_to_keep`` positions.

    Its (batch, 1, 1) index of each row's last position p becomes (batch, k, 1): p - k + 1
    to p. ``num_logits_to_keep`` (:data:`LOGITS_TO_KEEP`) is a (1,) int64 graph input with
    an initializer of value 1 (an ONNX Runtime overridable initializer): a run that does not
    feed it (onnxruntime-genai's, a plain decoding step's) gets each row's last token, and
    ``logits`` keeps its declared (batch, 1, vocab); a runtime verifying k drafts feeds k.
    """
    marked = [n for n in graph if n.metadata_props.get(LAST_TOKEN_ROWS_KEY) == "1"]
    if len(marked) != 1 or None in marked[0].inputs or LOGITS_TO_KEEP in graph.initializers:
        return False
    gather = marked[0]
    index = gather.inputs[1]
    keep = ir.Value(name=LOGITS_TO_KEEP, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
    keep.const_value = ir.tensor(np.array([1], np.int64), name=LOGITS_TO_KEEP)
    graph.inputs.append(keep)
    graph.register_initializer(keep)

    def add(op_type: str, *inputs: ir.Value | None, **attributes: Any) -> ir.Value:
        node = ir.node(op_type, list(inputs), attributes=attributes)
        graph.insert_before(gather, node)
        return node.outputs[0]

    one = _constant(graph, gather, [1])
    scalar = add("Reshape", keep, _constant(graph, gather, []))
    offsets = add("Range", _constant(graph, gather, 0), scalar, _constant(graph, gather, 1))
    column = add("Reshape", offsets, _constant(graph, gather, [1, -1, 1]))  # (1, k, 1)
    first = add("Sub", index, add("Sub", keep, one))  # (batch, 1, 1)
    gather.replace_input_with(1, add("Add", first, column))  # (batch, k, 1)
    axis = ir.SymbolicDim(LOGITS_TO_KEEP)
    for value in _downstream(gather.outputs[0]):
        shape = value.shape
        if shape is not None and len(shape) == 3 and shape[1] == 1 and not value.is_graph_output():
            value.shape = ir.Shape([shape[0], axis, shape[2]])
    return True


def lean_group_query_attention(model: ir.Model) -> dict[str, int]:
    """Apply the rewrites in place; return how often each applied (none: no GQA)."""
    graph = model.graph
    attention = [n for n in graph if n.op_type == "GroupQueryAttention"]
    if not attention:
        return {}
    dropped = _drop_reshape_chains(graph)
    round_trips = _drop_squeeze_round_trips(graph)
    ir.passes.common.RemoveUnusedNodesPass()(model)  # the dropped chains still read their input
    packed = sum(_pack_qkv(graph, node) for node in attention)
    keeps = keep_last_logits(graph)
    ir.passes.common.RemoveUnusedNodesPass()(model)
    ir.passes.common.CommonSubexpressionEliminationPass()(model)
    shared = shares_past_present(graph)
    if shared:
        model.metadata_props[SHARE_BUFFER_KEY] = "1"
    unread = [str(v.name) for v in graph.inputs if not v.uses() and v.const_value is None]
    if unread:
        model.metadata_props[UNREAD_INPUTS_KEY] = ",".join(unread)
    return {
        "reshape chains dropped": dropped,
        "squeeze round trips dropped": round_trips,
        "packed QKV MatMul": packed,
        "shared past/present buffer": int(shared),
        "logits of the last k positions": int(keeps),
    }
