"""Computations on weights only, of any ops, as lazily computed initializers.

``fold_weight_transforms`` folds layout ops one node at a time. Models also compute on
their weights in ``forward`` with arithmetic: weight standardisation (timm's NF-ResNets:
``(w - mean(w)) / sqrt(var(w) + eps) * gain``), scaled weights, masks and position tables
built from parameters. Those chains depend on no graph input, yet run at every call and
made such graphs several times torch.onnx's size (#22).

This pass finds every node whose inputs are all constants, at least one of them a weight,
and replaces each value such a chain hands to the rest of the graph (its frontier) by an
initializer named after its largest source weight (``conv.weight.folded``). Its data is an
``ir.LazyTensor`` that runs the chain's nodes in ONNX Runtime (no graph optimization, so
ONNX's semantics) from the *current* data of its sources, one tensor at a time, only when
the model is serialized: a fake or meta export stays weight-free, and
``save(model_state=...)`` recomputes it from the state given. Copies stay small: a frontier
larger than 64 KiB is folded only when its source weights are used by the chain alone
(they then leave the model) and it is no larger than they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from onnx_export._fake import is_weight
from onnx_export.passes.fold_weights import derived_initializer, weight_sources

__all__ = ["fold_weight_computations"]

_SMALL_COPY = 1 << 16
#: Ops whose output is not a function of their inputs.
_NOT_PURE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"}
_NOT_PURE |= {"Multinomial", "Bernoulli"}
#: Ops whose output depends on the shape of their input, not its data.
_SHAPE_ONLY = {"Shape", "Size"}


def _pure(node: ir.Node) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_PURE or not node.inputs:
        return False
    kinds = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
    return not any(attr.type in kinds for attr in node.attributes.values())


def _weight_nodes(graph: ir.Graph) -> tuple[list[ir.Node], set[ir.Value], set[ir.Value]]:
    """The nodes computed from constants only (in order), their outputs, the weighty ones.

    The weighty outputs are those that depend on a weight's data. Constant-only nodes
    join the chains they feed (the ``Concat`` of a reshape's target shape, before the
    optimizer has folded it); only weighty values are folded here, the others (a
    weight's ``Shape`` too) are the optimizer's, which reads them as constants.
    """
    nodes: list[ir.Node] = []
    computed: set[ir.Value] = set()
    weighty: set[ir.Value] = set()

    def constant(value: ir.Value) -> bool:
        return value in computed or (value.const_value is not None and not value.is_graph_input())

    for node in graph:
        inputs = [v for v in node.inputs if v is not None]
        if not _pure(node) or not inputs or not all(constant(v) for v in inputs):
            continue
        nodes.append(node)
        computed.update(node.outputs)
        if node.op_type in _SHAPE_ONLY:
            continue  # a weight's shape: a constant that the optimizer folds (and reads)
        if any(v in weighty or weight_sources(v) for v in inputs):
            weighty.update(node.outputs)
    return nodes, computed, weighty


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    shape = value.shape
    if shape is None or value.dtype is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]  # checked just above


def _closure(value: ir.Value, computed: set[ir.Value]) -> tuple[list[ir.Node], list[ir.Value]]:
    """The chain's nodes that ``value`` needs (in graph order) and its constant leaves."""
    nodes: dict[ir.Node, None] = {}
    leaves: dict[ir.Value, None] = {}
    stack = [value]
    while stack:
        current = stack.pop()
        producer = current.producer()
        if current not in computed or producer is None:
            leaves[current] = None
            continue
        if producer in nodes:
            continue
        nodes[producer] = None
        stack.extend(v for v in producer.inputs if v is not None)
    graph = value.graph
    order = {node: i for i, node in enumerate(graph)} if graph is not None else {}
    return sorted(nodes, key=lambda n: order.get(n, 0)), list(leaves)


def _program(
    nodes: Sequence[ir.Node], leaves: Sequence[ir.Value], output: ir.Value, opsets: dict[str, int]
) -> bytes:
    """The chain as a small ONNX model: leaves in (``leaf0``...), ``output`` out (no data).

    Its values get names of their own: before the optimizer (whose ``NameFixPass`` makes
    them unique) two values of the model may share one.
    """
    names = {leaf: f"leaf{i}" for i, leaf in enumerate(leaves)}

    def name(value: ir.Value | None) -> str:
        return "" if value is None else names.setdefault(value, f"v{len(names)}")

    def info(value: ir.Value) -> onnx.ValueInfoProto:
        dtype, shape = value.dtype, _static_shape(value)
        if shape is None and value.const_value is not None:  # a constant: its data's shape
            dtype, shape = value.const_value.dtype, tuple(value.const_value.shape.numpy())
        assert dtype is not None and shape is not None
        return onnx.helper.make_tensor_value_info(name(value), int(dtype), list(shape))

    protos = []
    for node in nodes:
        proto = ir.serde.serialize_node(node)
        proto.input[:] = [name(v) for v in node.inputs]
        proto.output[:] = [name(v) for v in node.outputs]
        protos.append(proto)
    # Constants that are not weights stay constants: fed as inputs, their values are
    # unknown to ONNX Runtime's shape inference, which then refused a Resize whose sizes
    # are computed from them (GOT-OCR2's relative positions, at save: "Number of
    # elements of input 'sizes' (0) must be same as rank of input 'X'").
    kept = [v for v in leaves if v.const_value is not None and not weight_sources(v)]
    fed = [v for v in leaves if all(v is not k for k in kept)]
    constants = [ir.serde.serialize_tensor(v.const_value) for v in kept if v.const_value]
    for proto, value in zip(constants, kept, strict=True):
        proto.name = name(value)
    graph = onnx.helper.make_graph(
        protos, "folded", [info(v) for v in fed], [info(output)], initializer=constants
    )
    imports = [onnx.helper.make_opsetid(d, v) for d, v in opsets.items() if d in ("", "ai.onnx")]
    model = onnx.helper.make_model(graph, opset_imports=imports, ir_version=10)
    data: bytes = model.SerializeToString()
    return data


def _runner(program: bytes, names: list[str]) -> Callable[[list[np.ndarray | None]], np.ndarray]:
    def compute(arrays: list[np.ndarray | None]) -> np.ndarray:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(program, options, providers=["CPUExecutionProvider"])
        inputs = {i.name for i in session.get_inputs()}  # constants are not fed
        feed = {n: a for n, a in zip(names, arrays, strict=True) if a is not None and n in inputs}
        return np.asarray(session.run(None, feed)[0])

    return compute


def _sources(leaves: Sequence[ir.Value]) -> list[ir.Value]:
    found: dict[ir.Value, None] = {}
    for leaf in leaves:
        found.update(dict.fromkeys(weight_sources(leaf)))
    return list(found)


def _bytes(value: ir.Value) -> int:
    shape = _static_shape(value)
    dtype = value.dtype
    return 0 if shape is None or dtype is None else int(dtype.itemsize * int(np.prod(shape)))


def _worth_it(output: ir.Value, leaves: Sequence[ir.Value], chain: set[ir.Node]) -> bool:
    size = _bytes(output)
    if size <= _SMALL_COPY:
        return True
    weights = [leaf for leaf in leaves if is_weight(leaf) or weight_sources(leaf)]
    alone = all(use.node in chain for w in weights for use in w.uses())
    return alone and size <= sum(_bytes(w) for w in weights)


def fold_weight_computations(model: ir.Model) -> int:
    """Fold every weight-only computation into lazily computed initializers; return how many."""
    graph = model.graph
    nodes, computed, weighty = _weight_nodes(graph)
    if not weighty:
        return 0
    chain = set(nodes)
    opsets = dict(model.opset_imports)
    folded = 0
    for value in [v for n in nodes for v in n.outputs if v in weighty]:
        if value.is_graph_output() or not any(u.node not in chain for u in value.uses()):
            continue
        shape, dtype = _static_shape(value), value.dtype
        if shape is None or dtype is None:
            continue
        members, leaves = _closure(value, computed)
        if not _worth_it(value, leaves, chain):
            continue
        sources = _sources(leaves)
        base = max(sources, key=_bytes).name if sources else value.name
        names = [f"leaf{i}" for i in range(len(leaves))]
        compute = _runner(_program(members, leaves, value, opsets), names)
        initializer = derived_initializer(graph, f"{base}.folded", leaves, compute, dtype, shape)
        for use in [u for u in value.uses() if u.node not in chain]:
            use.node.replace_input_with(use.idx, initializer)
        folded += 1
    _remove_dead(graph, nodes)
    return folded


def _remove_dead(graph: ir.Graph, nodes: list[ir.Node]) -> None:
    """Drop the chains' nodes nothing reads any more, and the constants only they read."""
    leaves: list[ir.Value] = []
    for node in reversed(nodes):
        if any(v.uses() or v.is_graph_output() for v in node.outputs):
            continue
        leaves.extend(v for v in node.inputs if v is not None)
        graph.remove(node, safe=True)
    for value in leaves:
        name = str(value.name)
        if (
            graph.initializers.get(name) is value
            and not value.uses()
            and not value.is_graph_output()
        ):
            graph.initializers.pop(name)
