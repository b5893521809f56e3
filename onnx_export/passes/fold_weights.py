"""Weight layout transforms (Transpose, Reshape, Cast, Slice, Concat...) as new initializers.

The optimizer keeps the model's weights out of constant folding (a folded copy would
double the memory of a large model), so ``MatMul(x, Transpose(fc.weight))`` and the
``Slice``/``Concat`` that reorder an LSTM's gates stay in the graph and run at every call.
The same holds for a ``Gather`` of a weight at constant indices (BERT's position
embeddings at a static sequence length) and an ``Expand`` to a constant shape (ViT's class
token at a static batch size). This pass replaces each such node by an initializer named
after where it comes from (``fc.weight.T``) whose data is an ``ir.LazyTensor``: it is
computed, one tensor at a time, only when the model is serialized (saved, or handed to ONNX
Runtime), from the *current* data of its source weights. So a fake or meta export stays
weight-free, a save holds at most one derived tensor at a time, and
``save(model_state=...)`` recomputes each derived tensor from the state it is given: the
source weights stay reachable by name through :data:`~onnx_export._fake.FOLDED_FROM_KEY`
even when no node uses them directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from onnx_export._fake import FOLDED_FROM_KEY, WEIGHT_KEY, is_weight

__all__ = ["fold_weight_transforms", "derived_initializer", "weight_sources"]

#: A folded tensor below this size is folded even when its source weight stays in use
#: (a copy that small costs nothing); larger ones only when the source goes away.
_SMALL_COPY = 1 << 16

_Kernel = Callable[[ir.Node, list[np.ndarray | None], tuple[int, ...]], np.ndarray]


def _reshape(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    assert inputs[0] is not None
    return inputs[0].reshape(shape)


def _transpose(
    node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]
) -> np.ndarray:
    assert inputs[0] is not None
    perm = node.attributes.get_ints("perm", None)
    return np.transpose(inputs[0], None if perm is None else list(perm))


def _cast(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    assert inputs[0] is not None
    return inputs[0].astype(ir.DataType(node.attributes.get_int("to", 0)).numpy())


def _identity(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    assert inputs[0] is not None
    return inputs[0]


def _concat(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    parts = [a for a in inputs if a is not None]
    return np.concatenate(parts, axis=node.attributes.get_int("axis", 0))


def _slice(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    data, starts, ends, *rest = [*inputs, None, None][:5]
    assert data is not None and starts is not None and ends is not None
    axes = rest[0] if rest[0] is not None else np.arange(len(starts))
    steps = rest[1] if rest[1] is not None else np.ones(len(starts), dtype=np.int64)
    index: list[slice] = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        index[int(axis) % data.ndim] = slice(int(start), int(end), int(step))
    return data[tuple(index)]


def _gather(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    data, indices = inputs[0], inputs[1]
    assert data is not None and indices is not None
    axis = node.attributes.get_int("axis", 0)
    return np.take(data, indices.astype(np.int64), axis=axis)


def _expand(node: ir.Node, inputs: list[np.ndarray | None], shape: tuple[int, ...]) -> np.ndarray:
    assert inputs[0] is not None
    return np.broadcast_to(inputs[0], shape)


_KERNELS: dict[str, tuple[_Kernel, str]] = {
    "Expand": (_expand, "expand"),
    "Gather": (_gather, "gather"),
    "Transpose": (_transpose, "transpose"),
    "Reshape": (_reshape, "reshape"),
    "Flatten": (_reshape, "flatten"),
    "Unsqueeze": (_reshape, "unsqueeze"),
    "Squeeze": (_reshape, "squeeze"),
    "Cast": (_cast, "to"),
    "Identity": (_identity, "identity"),
    "Concat": (_concat, "concat"),
    "Slice": (_slice, "slice"),
}


def weight_sources(value: ir.Value) -> list[ir.Value]:
    """The model weights ``value`` is computed from (itself if it is one; none if neither)."""
    folded = value.meta.get(FOLDED_FROM_KEY)
    if folded is not None:
        return list(folded)
    return [value] if is_weight(value) else []


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    shape = value.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]  # checked just above


def derived_initializer(
    graph: ir.Graph,
    name: str,
    inputs: Sequence[ir.Value | None],
    compute: Callable[[list[np.ndarray | None]], np.ndarray],
    dtype: ir.DataType,
    shape: tuple[int, ...],
) -> ir.Value:
    """A new initializer of ``graph`` computed lazily from the data of ``inputs``.

    ``compute`` gets each input's data as numpy (``None`` for a missing input) at the
    moment the tensor is serialized, so weights attached later are the ones used.
    """
    sources: list[ir.Value] = []
    for value in inputs:
        for source in weight_sources(value) if value is not None else ():
            if all(source is not s for s in sources):
                sources.append(source)

    def evaluate() -> ir.TensorProtocol:
        arrays = [
            None if v is None or v.const_value is None else v.const_value.numpy() for v in inputs
        ]
        result = np.ascontiguousarray(compute(arrays), dtype=dtype.numpy())
        if result.shape != shape and result.size == int(np.prod(shape)):
            # The same values in the graph's own shape (a 0-d weight such as CLIP's
            # logit_scale can come out of ONNX Runtime as shape (1,)).
            result = result.reshape(shape)
        if result.shape != shape:
            raise ValueError(f"Folded weight {name!r} came out {result.shape}, expected {shape}.")
        return ir.Tensor(result, dtype=dtype, name=name)

    unique = name
    for i in range(1, 1 << 20):
        if unique not in graph.initializers:
            break
        unique = f"{name}.{i}"
    tensor = ir.LazyTensor(evaluate, dtype=dtype, shape=ir.Shape(list(shape)), name=unique)
    kinds = [
        s.const_value.metadata_props.get(WEIGHT_KEY) for s in sources if s.const_value is not None
    ]
    tensor.metadata_props[WEIGHT_KEY] = next((k for k in kinds if k), "parameter")
    value = ir.Value(
        name=unique, shape=ir.Shape(list(shape)), type=ir.TensorType(dtype), const_value=tensor
    )
    value.meta[WEIGHT_KEY] = True
    value.meta[FOLDED_FROM_KEY] = tuple(sources)
    graph.register_initializer(value)
    return value


def _label(node: ir.Node, inputs: Sequence[ir.Value | None]) -> str:
    label = _KERNELS[node.op_type][1]
    if node.op_type == "Concat":
        names = [str(s.name) for v in inputs if v is not None for s in weight_sources(v)]
        return "+".join(dict.fromkeys(names)) + ".concat"
    base = str(inputs[0].name if inputs[0] is not None else "")
    if node.op_type == "Transpose":
        perm = node.attributes.get_ints("perm", None)
        return f"{base}.T" if perm is not None and list(perm) == [1, 0] else f"{base}.{label}"
    if node.op_type == "Cast":
        return f"{base}.to({ir.DataType(node.attributes.get_int('to', 0)).name.lower()})"
    return f"{base}.{label}"


def _folded_size(node: ir.Node) -> int | None:
    """Bytes of ``node``'s output if it can be folded (None if it cannot)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in _KERNELS:
        return None
    output = node.outputs[0] if len(node.outputs) == 1 else None
    shape = _static_shape(output) if output is not None else None
    if output is None or shape is None or output.dtype is None or output.is_graph_output():
        return None  # a graph output's name is the model's interface: keep its node
    inputs = [v for v in node.inputs if v is not None]
    if not all(v.const_value is not None for v in inputs):
        return None
    if not any(weight_sources(v) for v in inputs):
        return None  # constants without weights are the optimizer's to fold
    return int(output.dtype.itemsize * int(np.prod(shape)))


def _foldable(node: ir.Node) -> bool:
    size = _folded_size(node)
    if size is None:
        return False
    if size <= _SMALL_COPY:
        return True
    # A large folded copy only when its weight inputs have no other kind of use.
    inputs = [v for v in node.inputs if v is not None and weight_sources(v)]
    return all(use.node.op_type in _KERNELS for v in inputs for use in v.uses())


def _bound(
    node: ir.Node, shape: tuple[int, ...]
) -> Callable[[list[np.ndarray | None]], np.ndarray]:
    kernel = _KERNELS[node.op_type][0]

    def compute(arrays: list[np.ndarray | None]) -> np.ndarray:
        return kernel(node, arrays, shape)

    return compute


def fold_weight_transforms(model: ir.Model) -> int:
    """Replace layout ops on weights by lazily computed initializers; return how many."""
    graph = model.graph
    folded = 0
    touched: list[ir.Value] = []
    for node in list(graph):
        if not _foldable(node):
            continue
        output = node.outputs[0]
        shape = _static_shape(output)
        dtype = output.dtype
        if shape is None or dtype is None:
            continue
        inputs = list(node.inputs)
        value = derived_initializer(
            graph, _label(node, inputs), inputs, _bound(node, shape), dtype, shape
        )
        ir.convenience.replace_all_uses_with(output, value)
        touched.extend(v for v in inputs if v is not None)
        graph.remove(node, safe=True)
        folded += 1
    _drop_unused(graph, touched)
    return folded


def _drop_unused(graph: ir.Graph, values: Sequence[ir.Value]) -> None:
    """Drop initializers among ``values`` (and folded ones) that nothing uses any more."""
    candidates = [*values, *(v for v in graph.initializers.values() if FOLDED_FROM_KEY in v.meta)]
    for value in candidates:
        if value.name in graph.initializers and not value.uses() and not value.is_graph_output():
            graph.initializers.pop(str(value.name))
