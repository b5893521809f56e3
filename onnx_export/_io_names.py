"""The ONNX graph's inputs in the adapter's order, and the names the user asked for.

The program is captured with the model's own call (positional stays positional), while
the adapter feeds ONNX in one canonical order (``forward``'s parameters, ``**kwargs``
after). The graph's inputs are put in that order once, after translation; then
torch.onnx's ``input_names``/``output_names`` rename them, so the graph and the adapter
built from it agree. A legacy ``dynamic_axes`` dict becomes the simple
``dynamic_shapes`` form here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from onnx_export._dynamic import leaf_items, named_inputs

__all__ = ["canonical_input_order", "rename_values", "dynamic_axes_to_shapes"]


def _tensor_leaves(tree: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def canonical_input_order(
    graph: ir.Graph,
    captured: tuple[tuple[Any, ...], dict[str, Any]],
    canonical: tuple[tuple[Any, ...], dict[str, Any]],
) -> None:
    """Reorder ``graph``'s inputs (one per tensor of ``captured``) as in ``canonical``.

    Both are the same call, so they hold the same tensor objects: each canonical tensor
    is matched to the captured one that is the same object (in order, for a tensor
    passed twice).
    """
    given, wanted = _tensor_leaves(captured), _tensor_leaves(canonical)
    inputs = list(graph.inputs)
    if len(given) != len(inputs) or len(wanted) != len(inputs):
        return  # constants folded into the graph: nothing to match against
    free = list(range(len(given)))
    order = []
    for tensor in wanted:
        index = next((i for i in free if given[i] is tensor), None)
        if index is None:
            return
        free.remove(index)
        order.append(index)
    if order != sorted(order):
        graph.inputs.clear()
        graph.inputs.extend(inputs[i] for i in order)


def _unique_elsewhere(graph: ir.Graph, value: ir.Value, name: str) -> None:
    """Rename any other value already called ``name`` (an FX node's name) out of the way."""
    taken = {v.name for node in graph for v in node.outputs} | set(graph.initializers)
    for node in graph:
        for other in node.outputs:
            if other is not value and other.name == name:
                suffix = 1
                while f"{name}_{suffix}" in taken:
                    suffix += 1
                other.name = f"{name}_{suffix}"
                taken.add(other.name)


def rename_values(
    graph: ir.Graph, values: Sequence[ir.Value], names: Sequence[str] | None, what: str
) -> None:
    """Rename ``values`` (the graph's inputs or outputs) to ``names``, as torch.onnx does.

    Fewer names than values rename the first ones (torch.onnx's rule).

    Raises:
        ValueError: More names than values, duplicates, or an empty name.
    """
    if names is None:
        return
    if len(names) > len(values):
        raise ValueError(
            f"{what} has {len(names)} names but the graph has {len(values)} "
            f"{what.split('_', maxsplit=1)[0]}s ({[v.name for v in values]})."
        )
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{what} must be distinct non-empty strings, got {list(names)}.")
    renamed = {id(v) for v in values[: len(names)]}
    others = {v.name for v in (*graph.inputs, *graph.outputs) if id(v) not in renamed}
    clash = [n for n in names if n in others]
    if clash:
        raise ValueError(
            f"{what}: {clash} already name other graph inputs or outputs "
            f"({sorted(n for n in others if n)}); choose names that no other input or output has."
        )
    for value, name in zip(values, names, strict=False):
        if value.name == name:
            continue
        if name in graph.initializers:
            raise ValueError(f"{what}: {name!r} is the name of a weight; choose another.")
        _unique_elsewhere(graph, value, name)
        value.name = name


def dynamic_axes_to_shapes(
    dynamic_axes: Mapping[str, Any],
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> dict[str, Any]:
    """torch.onnx's ``dynamic_axes`` as the simple ``dynamic_shapes`` form.

    Keys are input names (``input_names`` when given, else the graph's own names: the
    parameter or dotted path); output names are ignored (output shapes follow from the
    inputs). A list of axes gets torch.onnx's names, ``"<input>_dynamic_axes_<n>"``.

    Raises:
        ValueError: A key that names neither an input nor one of ``output_names``.
    """
    inputs = named_inputs(signature, args, kwargs)
    paths = [
        path
        for name, value in inputs.items()
        for path, leaf in leaf_items(name, value)
        if isinstance(leaf, torch.Tensor)
    ]
    alias = dict(zip(input_names or (), paths, strict=False))
    shapes: dict[str, Any] = {}
    for key, axes in dynamic_axes.items():
        path = alias.get(key, key)
        if path not in paths:
            if key in (output_names or ()):
                continue  # output shapes follow from the inputs'
            raise ValueError(
                f"dynamic_axes names {key!r}, which is not an input"
                + (f" ({list(alias)})" if alias else f" ({paths})")
                + " nor one of output_names; name inputs as input_names (or the graph) does."
            )
        if isinstance(axes, Mapping):
            shapes[path] = {int(a): str(n) for a, n in axes.items()}
        else:
            shapes[path] = {int(a): f"{key}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    return shapes
