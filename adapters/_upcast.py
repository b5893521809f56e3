"""Computing a bfloat16/float16 model in float32, for runtimes that lack the narrow kernels.

ONNX Runtime's CPU provider has no bfloat16 kernel for most ops (``Gemm``, ``Mul``...).
:func:`upcast_model` rewrites a model so that it computes in float32 while its inputs and
outputs keep their dtypes: each narrow graph input is cast to float32 where it enters, each
narrow graph output is cast back where it leaves, and every narrow weight, constant, ``Cast``
target and typed attribute inside becomes float32. Results can differ from a narrow
computation by a few units in the last place of the narrow dtype.

``onnx`` is imported here, so this module is loaded only when an upcast is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["UPCAST_DTYPES", "upcast_model"]

UPCAST_DTYPES = {"bfloat16": 16, "float16": 10}
"""Dtype names that can be upcast -> their ``onnx.TensorProto`` element type."""

_FLOAT = 1
_TYPED_ATTRIBUTES = ("to", "dtype")


def upcast_model(model: Any, dtypes: Sequence[str]) -> Any:
    """Rewrite ``model`` (an ``onnx.ModelProto``, changed in place) to compute in float32.

    Args:
        model: The model, with its weights loaded.
        dtypes: Names from :data:`UPCAST_DTYPES`.

    Returns:
        ``model``.

    Example:
        >>> from onnx import helper, TensorProto
        >>> graph = helper.make_graph(
        ...     [helper.make_node("Mul", ["x", "x"], ["y"])], "g",
        ...     [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
        ...     [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])])
        >>> model = upcast_model(helper.make_model(graph), ["bfloat16"])
        >>> [n.op_type for n in model.graph.node]
        ['Cast', 'Mul', 'Cast']
    """
    narrow = {UPCAST_DTYPES[name] for name in dtypes}
    graph = model.graph
    taken = _all_names(graph)
    rename: dict[str, str] = {}
    entry: list[Any] = []
    for value in graph.input:
        if value.type.tensor_type.elem_type in narrow:
            rename[value.name] = _fresh(f"{value.name}__float32", taken)
            entry.append(_cast(value.name, rename[value.name], _FLOAT))
    inputs = {value.name for value in graph.input}
    exit_casts: list[Any] = []
    for value in graph.output:
        element_type = value.type.tensor_type.elem_type
        if element_type in narrow and value.name not in inputs:
            rename[value.name] = _fresh(f"{value.name}__float32", taken)
            exit_casts.append(_cast(rename[value.name], value.name, element_type))
    _upcast_graph(graph, narrow, rename, top=True)
    nodes = [*entry, *graph.node, *exit_casts]
    del graph.node[:]
    graph.node.extend(nodes)
    for function in model.functions:
        for node in function.node:
            _upcast_node(node, narrow, {})
    return model


def _upcast_graph(graph: Any, narrow: set[int], rename: dict[str, str], *, top: bool) -> None:
    for node in graph.node:
        _upcast_node(node, narrow, rename)
    inputs = {value.name for value in graph.input}
    for tensor in graph.initializer:
        if tensor.data_type in narrow and tensor.name not in inputs:  # not an input's default
            tensor.CopyFrom(_float_tensor(tensor, rename.get(tensor.name, tensor.name)))
    for value in graph.value_info:
        value.name = rename.get(value.name, value.name)
        _float_type(value, narrow)
    if not top:  # a subgraph's own inputs and outputs compute in float32 too
        for value in (*graph.input, *graph.output):
            _float_type(value, narrow)
        for value in graph.output:  # an outer value passed straight through
            value.name = rename.get(value.name, value.name)


def _upcast_node(node: Any, narrow: set[int], rename: dict[str, str]) -> None:
    node.input[:] = [rename.get(name, name) for name in node.input]
    node.output[:] = [rename.get(name, name) for name in node.output]
    for attribute in node.attribute:
        if attribute.name in _TYPED_ATTRIBUTES and attribute.type == 2 and attribute.i in narrow:
            attribute.i = _FLOAT  # Cast(to=...), RandomNormal(dtype=...), EyeLike(dtype=...)
        elif attribute.type == 4 and attribute.t.data_type in narrow:  # TENSOR
            attribute.t.CopyFrom(_float_tensor(attribute.t, attribute.t.name))
        elif attribute.type == 5:  # GRAPH
            _upcast_graph(attribute.g, narrow, rename, top=False)
        elif attribute.type == 10:  # GRAPHS
            for graph in attribute.graphs:
                _upcast_graph(graph, narrow, rename, top=False)


def _float_tensor(tensor: Any, name: str) -> Any:
    from onnx import numpy_helper

    array = numpy_helper.to_array(tensor)
    if array.dtype == np.uint16:  # older onnx returns bfloat16 as its raw bits
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _float_type(value: Any, narrow: set[int]) -> None:
    tensor_type = value.type.tensor_type
    if tensor_type.elem_type in narrow:
        tensor_type.elem_type = _FLOAT


def _cast(source: str, target: str, to: int) -> Any:
    from onnx import helper

    return helper.make_node("Cast", [source], [target], name=f"upcast_{target}", to=to)


def _all_names(graph: Any) -> set[str]:
    names = {value.name for value in (*graph.input, *graph.output, *graph.value_info)}
    names.update(tensor.name for tensor in graph.initializer)
    for node in graph.node:
        names.update(_node_names(node))
    return names


def _node_names(node: Any) -> Iterable[str]:
    yield from node.input
    yield from node.output
    yield node.name
    for attribute in node.attribute:
        for graph in (attribute.g, *attribute.graphs) if attribute.type in (5, 10) else ():
            yield from _all_names(graph)


def _fresh(name: str, taken: set[str]) -> str:
    candidate, number = name, 0
    while candidate in taken:
        number += 1
        candidate = f"{name}{number}"
    taken.add(candidate)
    return candidate
