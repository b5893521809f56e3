"""Names in the ONNX graph: inputs after ``forward``'s parameters, named symbolic dims."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import InputKind, SymIntArgument, TensorArgument
from torch.utils import _pytree as pytree

from onnx_export.capture._dynamic import DynamicInt, GeneratedDimName, key_text
from onnx_export.capture._user_code import warn_at_user_line
from onnx_export.errors import DimensionNameWarning

__all__ = [
    "leaf_paths",
    "DimNames",
    "MergedDimName",
    "dim_names_from_program",
    "graph_names",
    "names_for_signature",
    "warn_merged_dim_names",
    "check_int_bounds",
    "int_range",
    "axis_ranges",
]


def _names_in_context(context: object, count: int) -> list[str] | None:
    """Child names a pytree context spells out: a list of ``count`` keys, maybe nested first."""
    if (
        isinstance(context, (list, tuple))
        and len(context) == count
        and all(isinstance(k, (str, int)) for k in context)
    ):
        return [str(k) for k in context]
    if isinstance(context, (list, tuple)) and context:
        return _names_in_context(context[0], count)
    return None


def _marker_paths(context: Any, prefix: list[str], found: dict[int, list[str]]) -> None:
    """Attribute paths of the tensor markers in a ``transformers`` cache's pytree context."""
    if isinstance(context, dict):
        tag = context.get("_t")
        if tag in ("tensor", "sym") and isinstance(context.get("i"), int):
            found[context["i"]] = prefix
        elif tag in ("obj", "map", "seq", "items"):
            inner = context.get("s", context.get("v"))
            if tag == "items" and isinstance(inner, list):
                inner = {str(k): v for k, v in inner if isinstance(k, (str, int))}
            _marker_paths(inner, prefix, found)
        elif tag is None:
            for key, value in context.items():
                _marker_paths(value, [*prefix, str(key)], found)
    elif isinstance(context, list):
        for index, value in enumerate(context):
            _marker_paths(value, [*prefix, str(index)], found)


def _context_names(context: Any, count: int) -> list[str] | None:
    found: dict[int, list[str]] = {}
    _marker_paths(context, [], found)
    if sorted(found) != list(range(count)):
        return None
    return [".".join(found[i]) for i in range(count)]


def _walk_spec(
    spec: pytree.TreeSpec, prefix: list[str], out: list[list[str]], *, positional: bool = False
) -> None:
    """Leaf paths of ``spec``; ``positional``: indices everywhere but in dicts."""
    if spec.is_leaf():
        out.append(prefix)
        return
    children = list(spec.children())
    if isinstance(spec.context, dict) and "_t" in spec.context and not positional:
        names_by_marker = _context_names(spec.context, len(children))
        if names_by_marker and all(c.is_leaf() for c in children):
            out.extend([*prefix, *n.split(".")] for n in names_by_marker)
            return
    names: list[str] | None = None
    if positional:
        if spec.type is dict:
            names = _names_in_context(spec.context, len(children))
    else:
        fields = getattr(spec.context, "_fields", None)  # namedtuple: the context is the class
        if isinstance(fields, tuple) and len(fields) == len(children):
            names = [str(f) for f in fields]
        if names is None:
            names = _names_in_context(spec.context, len(children))
    for index, child in enumerate(children):
        step = names[index] if names else str(index)
        _walk_spec(child, [*prefix, step], out, positional=positional)


def _key_paths(spec: pytree.TreeSpec) -> list[list[str]]:
    """The key path of every leaf of ``spec``, as strings.

    Unflattening placeholders gives the exact keys torch's ``flatten_with_keys`` gives;
    classes whose unflattening needs real tensors (``transformers``' ``DynamicCache``)
    are named from the spec's contexts instead.
    """
    try:
        skeleton = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        paths = [
            [key_text(k) for k in keys] for keys, _ in pytree.tree_flatten_with_path(skeleton)[0]
        ]
        if len(paths) != spec.num_leaves:  # a class that keeps ints in its context
            raise ValueError("leaf count changed")
        return paths
    except Exception:  # a custom class that cannot hold ints
        out: list[list[str]] = []
        _walk_spec(spec, [], out)
        return out


def leaf_paths(spec: pytree.TreeSpec, positional_names: Sequence[str]) -> list[str]:
    """Dotted path of every leaf of an ``(args, kwargs)`` tree spec, e.g. ``"x.a.0"``."""
    paths: list[str] = []
    for keys in _key_paths(spec):
        parts = keys
        if len(parts) >= 2 and parts[0] == "0":  # positional argument
            index = int(parts[1])
            head = positional_names[index] if index < len(positional_names) else f"arg{index}"
            parts = [head, *parts[2:]]
        elif len(parts) >= 2:  # keyword argument
            parts = parts[1:]
        paths.append(".".join(parts))
    return paths


def output_paths(spec: pytree.TreeSpec) -> list[str]:
    """Names for the model's outputs: dict keys and attribute names where there are any."""
    paths = []
    for keys in _key_paths(spec):
        parts = keys
        if not parts or parts[0].isdigit():
            parts = ["output", *parts]
        paths.append(".".join(parts))
    return paths


def _dim_name(dim: Any) -> str | None:
    if isinstance(dim, str):
        return dim
    name = getattr(dim, "__name__", None)
    return name if isinstance(name, str) and type(dim).__name__ != "DimHint" else None


def _axis_names(spec: Any, tensor: torch.Tensor) -> dict[int, str]:
    items: Iterable[tuple[Any, Any]]
    if isinstance(spec, dict):
        items = spec.items()
    elif isinstance(spec, (list, tuple)):
        items = enumerate(spec)
    else:
        return {}
    named = {int(axis): _dim_name(dim) for axis, dim in items}
    return {a: n for a, n in named.items() if n is not None and a < tensor.dim()}


def _spec_at(dynamic_shapes: Any, parts: Sequence[str]) -> Any:
    node = dynamic_shapes
    for part in parts:
        if isinstance(node, dict):
            key: Any = part if part in node else (int(part) if part.lstrip("-").isdigit() else part)
            node = node.get(key)
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


@dataclasses.dataclass(frozen=True)
class MergedDimName:
    """A dynamic axis name the ONNX graph does not use: torch found the axis equal to another.

    Attributes:
        name: The name the user gave the axis (``"batch2"``).
        axis: Where the axis is, as ``input[axis]`` (``"y[0]"``).
        kept: The name the graph uses for both axes (``"batch"``).
        kept_axis: The axis that name was given to (``"x[0]"``).
    """

    name: str
    axis: str
    kept: str
    kept_axis: str

    def message(self) -> str:
        """The warning's text: which name went into which, and why.

        It opens with torch.onnx's own wording, so that warning filters written for
        torch.onnx's exporter (``message="# The axis name"``) apply to this one too.
        """
        return (
            f"# The axis name: {self.name!r} will not be used, since it shares the same "
            f"shape constraints with another axis: {self.kept!r}. torch.export found "
            f"{self.axis} always equal to {self.kept_axis} (the model requires them to be "
            f"equal), so the ONNX graph names both {self.kept!r}. Give both axes the same "
            "name to silence this warning."
        )


@dataclasses.dataclass(frozen=True)
class DimNames:
    """The user's names of the program's symbolic dims.

    Attributes:
        by_symbol: Each input dim's symbol (``"s17"``) -> the name the user gave it first.
        merged: The names given to axes whose symbol already had another name.
    """

    by_symbol: dict[str, str]
    merged: tuple[MergedDimName, ...] = ()


def dim_names_from_program(
    program: ExportedProgram,
    dynamic_shapes: Any,
    input_paths: Sequence[str],
) -> DimNames:
    """Map each input dim's symbol (``"s17"``) to the name the user gave it.

    ``dynamic_shapes`` is the user's spec keyed by input name (``DynamicShapes.names``).
    Two axes the user named differently but torch.export unified (the model adds the two
    inputs) share one symbol: the first name wins, the others are listed in ``merged``.
    """
    if not isinstance(dynamic_shapes, dict):
        return DimNames({})
    result: dict[str, str] = {}
    first_axis: dict[str, str] = {}
    merged: list[MergedDimName] = []
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user_inputs = [
        node
        for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True)
        if spec.kind == InputKind.USER_INPUT
    ]
    # The user's spec nests lists where a container is a custom class (a DynamicCache is
    # given as [keys, values]): find each leaf by its positional path too.
    positional: list[list[str]] = []
    _walk_spec(program.call_spec.in_spec, [], positional, positional=True)
    for index, (path, node) in enumerate(zip(input_paths, user_inputs, strict=True)):
        val = node.meta.get("val")
        spec = _spec_at(dynamic_shapes, path.split("."))
        if isinstance(val, torch.SymInt) and isinstance(spec, DynamicInt):
            name = _dim_name(spec.spec)  # a dynamic int named "n": dims equal to it read "n"
            if name is not None:
                result.setdefault(str(val.node.expr), name)
            continue
        if not isinstance(val, torch.Tensor):
            continue
        if spec is None and index < len(positional):
            spec = _spec_at(dynamic_shapes, [path.split(".")[0], *positional[index][2:]])
        for axis, name in _axis_names(spec, val).items():
            dim = val.shape[axis]
            if not isinstance(dim, torch.SymInt):
                continue
            symbol, where = str(dim.node.expr), f"{path}[{axis}]"
            kept = result.setdefault(symbol, name)
            first_axis.setdefault(symbol, where)
            generated = isinstance(name, GeneratedDimName)  # not the user's: no news
            if kept != name and not generated and all(m.name != name for m in merged):
                merged.append(MergedDimName(name, where, kept, first_axis[symbol]))
    return DimNames(result, tuple(merged))


def _user_inputs(program: ExportedProgram) -> list[torch.fx.Node]:
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    return [
        node
        for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True)
        if spec.kind == InputKind.USER_INPUT
    ]


def _finite(bound: Any) -> int | None:
    """A range bound as an int; ``None`` for torch's ``int_oo`` (a sympy non-Integer)."""
    if isinstance(bound, int) or bool(getattr(bound, "is_Integer", False)):
        return int(bound)
    return None


def int_range(program: ExportedProgram, val: torch.SymInt) -> tuple[int | None, int | None]:
    """The values a SymInt input may take in ``program`` (``None``: unbounded that side)."""
    found = program.range_constraints.get(val.node.expr)
    if found is None:
        return None, None
    return _finite(found.lower), _finite(found.upper)


def axis_ranges(
    program: ExportedProgram, val: torch.Tensor
) -> tuple[tuple[int, str, int | None, int | None], ...]:
    """``(axis, symbol, low, high)`` of each axis of an input that is a symbol of ``program``."""
    found: list[tuple[int, str, int | None, int | None]] = []
    for axis, size in enumerate(val.shape):
        if not isinstance(size, torch.SymInt):
            continue
        expr = size.node.expr
        if expr.is_Symbol:
            bounds = program.range_constraints.get(expr)
            if bounds is not None:
                low, high = _finite(bounds.lower), _finite(bounds.upper)
                found.append((axis, str(expr), low, high))
            continue
        derived = _linear_bounds(program, expr)
        if derived is not None:
            found.append((axis, str(expr), *derived))
    return tuple(found)


def _linear_bounds(program: ExportedProgram, expr: Any) -> tuple[int | None, int | None] | None:
    """Bounds of ``a*s + b`` (a derived ``Dim``, ``2 * Dim("h")``) from ``s``'s range."""
    symbols = expr.free_symbols
    if len(symbols) != 1:
        return None
    (symbol,) = symbols
    bounds = program.range_constraints.get(symbol)
    scale, shift = expr.diff(symbol), expr.subs(symbol, 0)
    if bounds is None or not (scale.is_Integer and shift.is_Integer) or int(scale) <= 0:
        return None
    low, high = _finite(bounds.lower), _finite(bounds.upper)
    a, b = int(scale), int(shift)
    return (None if low is None else a * low + b), (None if high is None else a * high + b)


def check_int_bounds(
    program: ExportedProgram, dynamic_shapes: Any, input_paths: Sequence[str]
) -> None:
    """Refuse a Python int marked dynamic that the model's code fixes, or narrows past a ``Dim``.

    torch.export takes only ``Dim.DYNAMIC`` on an int, so a ``Dim``'s bounds are checked
    here, as torch checks them on a tensor axis: the program must hold on all of them.
    ``Dim.AUTO`` lets the code fix the int (it is then a constant).

    Raises:
        ValueError: The program fixes the int, or its range is narrower than the ``Dim``'s.
    """
    if not isinstance(dynamic_shapes, dict):
        return
    for path, node in zip(input_paths, _user_inputs(program), strict=True):
        val = node.meta.get("val")
        spec = _spec_at(dynamic_shapes, path.split("."))
        if not isinstance(val, torch.SymInt) or not isinstance(spec, DynamicInt):
            continue
        found = program.range_constraints.get(val.node.expr)
        if found is None or spec.spec is Dim.AUTO:
            continue
        if found.lower == found.upper:
            raise ValueError(
                f"dynamic_shapes[{path!r}] is {spec.spec!r}, but the model's code fixes "
                f"{path} to {found.lower}. Give Dim.AUTO or None to export it at that value "
                "(the exported model checks it on each call), or change the code."
            )
        low, high = getattr(spec.spec, "min", None), getattr(spec.spec, "max", None)
        if low is None or high is None:
            continue
        if found.lower > low or found.upper < high:
            raise ValueError(
                f"dynamic_shapes[{path!r}] is {spec.spec!r} (range [{low}, {high}]), but the "
                f"model's code only holds for {path} in [{found.lower}, {found.upper}]. Give "
                f"Dim({_dim_name(spec.spec)!r}, min={found.lower}, max={found.upper}) or "
                "narrower, or Dim.DYNAMIC."
            )


def warn_merged_dim_names(merged: Sequence[MergedDimName]) -> None:
    """One ``DimensionNameWarning`` per unused axis name, at the user's line that exported.

    Called by ``dynamo_export`` after its recording block, so that the user sees them.
    """
    for name in merged:
        warn_at_user_line(name.message(), DimensionNameWarning)


def graph_names(
    model: torch.nn.Module, program: ExportedProgram
) -> tuple[list[str], list[str], list[str]]:
    """Leaf paths of the inputs, names of the graph inputs and of the outputs, for ONNX.

    The graph inputs are the tensors and the Python ints marked dynamic (SymInts).
    """
    return names_for_signature(inspect.signature(model.forward), program)


def names_for_signature(
    signature: inspect.Signature, program: ExportedProgram
) -> tuple[list[str], list[str], list[str]]:
    """:func:`graph_names` for a module's ``forward`` signature; inputs in captured order."""
    positional = [  # the captured call: positional parameters keep their names
        p.name
        for p in signature.parameters.values()
        if p.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        )
    ]
    paths = leaf_paths(program.call_spec.in_spec, positional)
    user_specs = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    tensor_inputs = [
        path
        for path, spec in zip(paths, user_specs, strict=True)
        if isinstance(spec.arg, (TensorArgument, SymIntArgument))
    ]
    taken = set(tensor_inputs)
    outputs = [f"{o}_out" if o in taken else o for o in output_paths(program.call_spec.out_spec)]
    return paths, tensor_inputs, outputs
