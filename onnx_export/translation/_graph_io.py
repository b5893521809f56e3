"""The ONNX graph's inputs in the adapter's order, and the names the user asked for.

The program is captured with the model's own call (positional stays positional), while
the adapter feeds ONNX in one canonical order (``forward``'s parameters, ``**kwargs``
after). The graph's inputs are put in that order once, after translation; then
torch.onnx's ``input_names``/``output_names`` rename them, so the graph and the adapter
built from it agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from onnx_export._options import ExportOptions
from onnx_export.capture._call import Call
from onnx_export.errors import ExportInputError
from onnx_export.translation._translate import PYTHON_INT_KEY

__all__ = ["canonical_input_order", "name_graph_io", "rename_values"]


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
    passed twice). Inputs fed from Python ints (marked dynamic) stay where they are; the
    adapter feeds them by name.
    """
    given, wanted = _tensor_leaves(captured), _tensor_leaves(canonical)
    slots = [i for i, v in enumerate(graph.inputs) if PYTHON_INT_KEY not in v.meta]
    inputs = [graph.inputs[i] for i in slots]
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
        reordered = list(graph.inputs)
        for slot, index in zip(slots, order, strict=True):
            reordered[slot] = inputs[index]
        graph.inputs.clear()
        graph.inputs.extend(reordered)


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


def name_graph_io(
    graph: ir.Graph, user_outputs: Sequence[Any], call: Call, options: ExportOptions
) -> None:
    """Graph inputs in the adapter's order, then torch.onnx's input and output names."""
    canonical_input_order(graph, (call.args, call.kwargs), call.canonical)
    try:
        rename_values(graph, list(graph.inputs), options.input_names, "input_names")
        outputs = [v for v in user_outputs if isinstance(v, ir.Value)]
        rename_values(graph, outputs, options.output_names, "output_names")
    except ValueError as e:
        raise ExportInputError(f"{e}") from e
