"""``onnx-export info``: what is in a saved ``.onnx`` file, read without running it.

Weights in external data files are not read; their sizes come from the tensors' shapes.
"""

from __future__ import annotations

import argparse
import inspect
import math
import pathlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from onnx_export.cli._arguments import add_model_argument
from onnx_export.cli._common import Subcommands, UsageError, add_command, existing_file, one_line

__all__ = ["register", "describe_model"]

#: Metadata on an initializer that holds one of the model's own parameters or buffers.
_WEIGHT_KEY = "pkg.onnx_export.weight"


def register(commands: Subcommands) -> None:
    """Add ``info MODEL.onnx``."""
    parser = add_command(
        commands,
        "info",
        help="describe a saved model: inputs, outputs, opset, size, weights, adapter",
        description="Print a saved model's inputs and outputs (dtypes and shapes with named "
        "dimensions), opsets, node count, parameter count and bytes, external data files, "
        "adapter (forward's signature, input paths, output structure) and file size. Does "
        "not load the weights. Exits 2 when the file is missing, empty or not ONNX.",
        handler=_run,
    )
    add_model_argument(parser)


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    import onnx

    path = existing_file(args.model, "the model")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf's DecodeError, OSError, onnx's own errors
        raise UsageError(f"{path} is not a readable ONNX model: {one_line(str(e))}") from e
    if not model.graph.node and not model.graph.output and not model.opset_import:
        raise UsageError(
            f"{path} is not an ONNX model: it parses as an empty protobuf message (no graph, "
            "no opset). Check that it is the .onnx file that was saved."
        )
    for line in describe_model(path, model):
        echo(line)
    return 0


def describe_model(path: pathlib.Path, model: Any) -> Iterator[str]:
    """The lines ``onnx-export info`` prints for ``model`` (an ``onnx.ModelProto``)."""
    graph = model.graph
    yield from _file_lines(path, graph)
    producer = f"{model.producer_name} {model.producer_version}".strip() or "unknown"
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    yield f"producer: {producer}; IR version {model.ir_version}; opsets: {opsets}"
    functions = f" (+ {len(model.functions)} local functions)" if model.functions else ""
    yield f"nodes: {_count_nodes(graph.node)}{functions}"
    yield from _weight_lines(graph.initializer)
    yield "inputs:"
    yield from (f"  {line}" for line in _values(graph.input))
    yield "outputs:"
    yield from (f"  {line}" for line in _values(graph.output))
    yield from _adapter_lines(model)


def _file_lines(path: pathlib.Path, graph: Any) -> Iterator[str]:
    files = _external_files(graph)
    yield f"file: {path} ({_size(path.stat().st_size)})"
    for name in files:
        data = path.parent / name
        size = _size(data.stat().st_size) if data.is_file() else "MISSING"
        yield f"external data: {data} ({size})"


def _external_files(graph: Any) -> list[str]:
    import onnx

    names: dict[str, None] = {}
    for tensor in graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            entries = {entry.key: entry.value for entry in tensor.external_data}
            names.setdefault(entries.get("location", "?"), None)
    return list(names)


def _count_nodes(nodes: Sequence[Any]) -> int:
    """Nodes, including those in subgraphs (``If``, ``Loop``, ``Scan`` bodies)."""
    total = len(nodes)
    for node in nodes:
        for attribute in node.attribute:
            subgraphs = [*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs]
            total += sum(_count_nodes(g.node) for g in subgraphs)
    return total


def _weight_lines(initializers: Sequence[Any]) -> Iterator[str]:
    """Parameters, buffers and constants, told apart by the exporter's mark on each weight."""
    groups: dict[str | None, list[Any]] = {}
    for tensor in initializers:
        kind = next((e.value for e in tensor.metadata_props if e.key == _WEIGHT_KEY), None)
        groups.setdefault(kind, []).append(tensor)
    if not initializers:
        yield "parameters: none"
        return
    if set(groups) == {None}:
        count, size = _count(initializers)
        yield (
            f"parameters: not marked in this file; initializers: {count:,} values in "
            f"{len(initializers)}, {_size(size)}"
        )
        return
    labels = {"parameter": "parameters", "buffer": "buffers", None: "constants"}
    for kind, label in labels.items():
        tensors = groups.pop(kind, [])
        if tensors or kind == "parameter":
            count, size = _count(tensors)
            yield f"{label}: {count:,} in {len(tensors)} initializers, {_size(size)}"
    for kind, tensors in groups.items():  # a mark this version does not know
        count, size = _count(tensors)
        yield f"{kind}: {count:,} in {len(tensors)} initializers, {_size(size)}"


def _count(initializers: Sequence[Any]) -> tuple[int, int]:
    count = size = 0
    for tensor in initializers:
        numel = math.prod(tensor.dims)
        count += numel
        size += numel * _itemsize(tensor.data_type)
    return count, size


def _itemsize(data_type: int) -> int:
    import onnx

    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize)
    except (KeyError, TypeError, ValueError):  # strings and types numpy cannot hold
        return 0


def _values(values: Sequence[Any]) -> Iterator[str]:
    width = max((len(v.name) for v in values), default=0)
    for value in values:
        yield f"{value.name:<{width}}  {_type(value.type)}"


def _type(type_proto: Any) -> str:
    import onnx

    if not type_proto.HasField("tensor_type"):
        return type_proto.WhichOneof("value") or "unknown type"
    tensor = type_proto.tensor_type
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
    except (KeyError, TypeError, ValueError):
        dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    if not tensor.HasField("shape"):
        return f"{dtype}[unknown shape]"
    dims = [
        str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
        for d in tensor.shape.dim
    ]
    return f"{dtype}[{', '.join(dims)}]"


def _adapter_lines(model: Any) -> Iterator[str]:
    from onnx_export.adapters import METADATA_KEY, AdapterSpec, AdapterSpecError

    text = next((p.value for p in model.metadata_props if p.key == METADATA_KEY), None)
    if text is None:
        yield "adapter: none (call the model with flat arrays, one per graph input)"
        return
    try:
        spec = AdapterSpec.from_json(text)
    except AdapterSpecError as e:
        yield f"adapter: malformed ({e})"
        return
    yield "adapter (onnx_export.load calls the model as forward is called):"
    yield f"  forward{_signature(spec.parameters)}"
    yield "  inputs: " + ", ".join(_leaf(leaf, "->") for leaf in spec.inputs)
    nones = _none_paths(spec.input_tree, [p.name for p in spec.parameters])
    if nones:
        yield "  None at export (pass None there, or leave it out): " + ", ".join(nones)
    yield from _range_lines(spec.inputs)
    if spec.relations:
        relations = "; ".join(r.text() for r in spec.relations)
        yield f"  related dimensions (calls that break them are refused): {relations}"
    if spec.conditions:
        conditions = "; ".join(c.expression for c in spec.conditions)
        yield f"  conditions between dimensions (calls that break them are refused): {conditions}"
    yield f"  output structure: {_tree(spec.output_tree)}"
    yield "  outputs: " + ", ".join(_leaf(leaf, "<-") for leaf in spec.outputs)


def _none_paths(tree: Any, names: Sequence[str]) -> list[str]:
    """The paths of the inputs that were ``None`` at export (the adapter drops them)."""
    found: list[str] = []
    if tree.kind != "tuple" or len(tree.children) != 2:
        return found
    args, kwargs = tree.children
    for i, child in enumerate(args.children):
        _collect_nones(child, names[i] if i < len(names) else f"args[{i}]", found)
    for key, child in zip(kwargs.keys, kwargs.children, strict=False):
        _collect_nones(child, str(key), found)
    return found


def _collect_nones(tree: Any, path: str, found: list[str]) -> None:
    if tree.kind == "none":
        found.append(path)
        return
    keys = list(tree.keys) if tree.kind == "dict" else list(range(len(tree.children)))
    for key, child in zip(keys, tree.children, strict=False):
        _collect_nones(child, f"{path}[{key!r}]", found)


def _signature(parameters: Sequence[Any]) -> str:
    kinds = {
        "positional_only": inspect.Parameter.POSITIONAL_ONLY,
        "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
        "var_positional": inspect.Parameter.VAR_POSITIONAL,
        "keyword_only": inspect.Parameter.KEYWORD_ONLY,
        "var_keyword": inspect.Parameter.VAR_KEYWORD,
    }
    empty = inspect.Parameter.empty
    return str(
        inspect.Signature(
            [
                inspect.Parameter(
                    p.name, kinds[p.kind], default=p.default if p.has_default else empty
                )
                for p in parameters
            ]
        )
    )


def _range_lines(inputs: Sequence[Any]) -> Iterator[str]:
    """The sizes each bounded dynamic axis (and the values each dynamic int) may take."""
    ranges = []
    for leaf in inputs:
        tensor = leaf.tensor
        if tensor is not None and tensor.int_range is not None:
            low, high = tensor.int_range
            ranges.append(f"{leaf.path} in [{low}, {'inf' if high is None else high}]")
        for bounds in tensor.axis_ranges if tensor is not None else ():
            origin = f" (set by {bounds.origin})" if bounds.origin else ""
            dim = tensor.shape[bounds.axis]
            ranges.append(f"{leaf.path}[{bounds.axis}] ({dim}) in {bounds.text()}{origin}")
    if ranges:
        yield "  ranges (calls outside are refused): " + "; ".join(ranges)


def _leaf(leaf: Any, arrow: str) -> str:
    if leaf.tensor is None:
        return f"{leaf.path} = {leaf.value!r} (constant)"
    return f"{leaf.path} {arrow} {leaf.tensor.name}"


def _tree(tree: Any) -> str:
    text = repr(tree)
    return text[len("TreeSpec(") : -1] if text.startswith("TreeSpec(") else text


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{size} B"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop always returns
