"""The user's ``dynamic_shapes``, checked and put in torch.export's format.

Inputs are named as the user knows them: ``forward``'s parameters, with ``**kwargs``
entries by their own keys (``past_key_values``), and nested leaves by dotted path
(``extras.0``, ``cache.key_cache.0``). Mistakes that torch.export would ignore or report
far from their cause (an axis the tensor does not have, a duplicate axis, an empty name,
a key that is not an input) are refused here, before capture, with ``ValueError``.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

from onnx_export.capture._spec_containers import (
    child_specs,
    container,
    key_text,
    named_form,
    torch_form,
)

__all__ = [
    "DynamicShapes",
    "DynamicInt",
    "GeneratedDimName",
    "named_inputs",
    "resolve_dynamic_shapes",
    "leaf_items",
    "key_text",
    "dynamic_axes_to_shapes",
]

_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD


class GeneratedDimName(str):
    """A dim name the exporter made up (``dynamic_axes`` given as a list of axes).

    The graph uses it like a user's name, but losing it to another name is no news to
    the user, who never chose it (no ``DimensionNameWarning``).
    """

    __slots__ = ()


@dataclasses.dataclass(frozen=True)
class DynamicInt:
    """The user's spec of a Python ``int`` input marked dynamic: a 0-d INT64 graph input.

    Attributes:
        spec: What the user gave: ``Dim.DYNAMIC``, ``Dim.AUTO``, a name, or a ``Dim``
            (maybe bounded).
            torch.export is given ``Dim.DYNAMIC`` (it takes no other form on an int);
            a ``Dim``'s bounds are checked against the program's range afterwards.
    """

    spec: Any


@dataclasses.dataclass(frozen=True)
class DynamicShapes:
    """The dynamic shapes of one export.

    Attributes:
        torch: torch.export's ``dynamic_shapes``: keyed by ``forward``'s parameters, the
            ``**kwargs`` entries nested under that parameter's name; strings replaced
            by ``Dim.DYNAMIC``.
        names: The same structure keyed by input name (``**kwargs`` entries at the top),
            with the user's own leaves (strings, ``Dim`` objects), to name dims later;
            namedtuple and dataclass fields keyed by name (``names["pair"]["left"]``), as
            the ONNX graph's dotted names read.
    """

    torch: Any
    names: Any


def named_inputs(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Every input by the name the user knows it: ``**kwargs`` entries by their own keys."""
    if signature is None:
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    bound = signature.bind(*args, **kwargs).arguments
    named: dict[str, Any] = {}
    for name, value in bound.items():
        if signature.parameters[name].kind == _VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def leaf_items(name: str, value: Any) -> list[tuple[str, Any]]:
    """``(dotted path, leaf)`` for every leaf of one input (the input itself for a tensor)."""
    flat, _ = pytree.tree_flatten_with_path(value)
    return [(".".join([name, *(key_text(k) for k in path)]), leaf) for path, leaf in flat]


def _skeleton(spec: pytree.TreeSpec, leaves: list[Any]) -> Any:
    """``leaves`` in the containers torch.export expects for a value flattened to ``spec``."""
    if spec.is_leaf():
        return leaves.pop(0)
    children = [_skeleton(child, leaves) for child in spec.children()]
    if spec.type in (dict, collections.OrderedDict):
        return dict(zip(spec.context, children, strict=True))
    if isinstance(getattr(spec.context, "_fields", None), tuple):  # a namedtuple: its class
        return spec.context(*children)
    if spec.type is tuple:
        return tuple(children)
    return children  # a list, or a registered class: torch matches its flattened children


def _static(value: Any) -> Any:
    """The spec of an input left out: ``None``, in the input's own containers."""
    if isinstance(value, torch.Tensor) or value is None:
        return None
    _, tree = pytree.tree_flatten(value)
    return _skeleton(tree, [None] * tree.num_leaves)


def _is_axes(spec: Any) -> bool:
    """A per-tensor spec: ``{axis: dim}`` or one entry per axis."""
    if isinstance(spec, dict):
        return all(isinstance(k, int) and not isinstance(k, bool) for k in spec)
    return isinstance(spec, (list, tuple))


def _check_name(where: str, axis: int, dim: Any) -> None:
    if isinstance(dim, str) and not dim.strip():
        raise ValueError(
            f"dynamic_shapes[{where!r}] names axis {axis} with an empty string; give the "
            "dimension a name such as 'batch', or leave the axis out to keep it static."
        )
    if dim is not None and not isinstance(dim, (str, int)) and not _is_dim(dim):
        raise ValueError(
            f"dynamic_shapes[{where!r}][{axis}] is {dim!r}; expected a name (str), a "
            "torch.export.Dim, Dim.AUTO/DYNAMIC/STATIC, an int or None."
        )


def _is_dim(dim: Any) -> bool:
    """A ``Dim``, a derived dim or a hint (``Dim.AUTO``): torch.export's own dim objects."""
    return type(dim).__module__.startswith("torch.export") or hasattr(dim, "__name__")


def _check_axes(where: str, spec: Any, tensor: torch.Tensor) -> Any:
    """Validate one tensor's spec; return it with negative axes made positive."""
    rank = tensor.dim()
    if isinstance(spec, (list, tuple)):
        if len(spec) != rank:
            raise ValueError(
                f"dynamic_shapes[{where!r}] has {len(spec)} entries but the input has "
                f"{rank} axes (shape {tuple(tensor.shape)}); give one entry per axis "
                "(None for a static one), or a dict {axis: name}."
            )
        for axis, dim in enumerate(spec):
            _check_name(where, axis, dim)
        return spec
    fixed: dict[int, Any] = {}
    for axis, dim in spec.items():
        if not -rank <= axis < rank:
            raise ValueError(
                f"dynamic_shapes[{where!r}] names axis {axis}, but the input has {rank} "
                f"axes (shape {tuple(tensor.shape)}): valid axes are 0 to {rank - 1} "
                f"(or -{rank} to -1)."
            )
        positive = axis % rank
        if positive in fixed:
            raise ValueError(
                f"dynamic_shapes[{where!r}] names axis {positive} twice ({axis} is the same "
                f"axis); give each axis one name."
            )
        _check_name(where, axis, dim)
        fixed[positive] = dim
    return fixed


def _check(where: str, spec: Any, value: Any) -> Any:
    """Validate ``spec`` against ``value``; return it in torch.export's form."""
    if spec is None:
        return _static(value)
    if isinstance(value, torch.Tensor):
        if not _is_axes(spec):
            raise ValueError(
                f"dynamic_shapes[{where!r}] is {spec!r}, but that input is a tensor: give "
                "{axis: name} or one entry per axis."
            )
        return _check_axes(where, spec, value)
    if isinstance(value, (int, float, bool, str)) or value is None:
        return _scalar(where, spec, value)
    node = container(value)
    if node is None:
        return spec  # a class torch's pytree does not know: torch.export refuses it
    specs = child_specs(where, spec, node)
    checked = [
        _check(f"{where}.{text}", s, v)
        for text, s, v in zip(node.texts, specs, node.children, strict=True)
    ]
    return torch_form(node, checked, spec)


def _scalar(where: str, spec: Any, value: Any) -> DynamicInt | None:
    """A Python scalar's spec: static (``None``, ``Dim.STATIC``, ``Dim.AUTO``) or an int's dim.

    A static scalar's value is recorded in the adapter and checked on each call. An ``int``
    marked dynamic (``Dim.DYNAMIC``, a name, a ``Dim``) becomes a 0-d INT64 graph input; the
    spec is kept (as a :class:`DynamicInt`). ``Dim.AUTO`` on an int is torch's: dynamic
    unless the model's code fixes the value; on other scalars it is static.
    """
    if spec is Dim.AUTO and type(value) is int:
        return DynamicInt(spec)
    if spec is Dim.STATIC or spec is Dim.AUTO:
        return None
    dynamic = spec is Dim.DYNAMIC or _is_dim(spec) or isinstance(spec, str)
    if dynamic and type(value) is int:
        if isinstance(spec, str) and not spec.strip():
            raise ValueError(
                f"dynamic_shapes[{where!r}] names the int input with an empty string; give "
                "it a name such as 'n', or Dim.DYNAMIC."
            )
        if type(spec).__name__ == "_DerivedDim":
            raise ValueError(
                f"dynamic_shapes[{where!r}] is the derived dim {spec!r} for the int "
                f"{value!r}: torch.export relates ints to no other dim. Give Dim.DYNAMIC, a "
                "name or a plain Dim (with bounds), and compute the relation in forward."
            )
        return DynamicInt(spec)
    if dynamic:
        raise ValueError(
            f"dynamic_shapes[{where!r}] is {spec!r} for the Python {type(value).__name__} "
            f"{value!r}: only a Python int can be a dynamic scalar (torch.export makes a "
            f"SymInt of it; it has no dynamic {type(value).__name__}). To make it dynamic "
            "pass it as a 0-d tensor (torch.tensor(value)); otherwise give None, "
            "Dim.STATIC or Dim.AUTO (the model is exported at this value and checks it on "
            "each call)."
        )
    raise ValueError(
        f"dynamic_shapes[{where!r}] is {spec!r}, but that input is {value!r}, not a "
        "tensor: only tensor dimensions and Python ints can be dynamic; leave it out."
    )


def _by_path(
    inputs: Mapping[str, Any], paths: Mapping[str, Any], direct: Mapping[str, Any]
) -> dict[str, Any]:
    """Fold ``"extras.0"``-style keys into the nested spec of their input."""
    per_input: dict[str, list[Any]] = {}
    for path, spec in paths.items():
        head = next((n for n in inputs if path.startswith(f"{n}.")), None)
        if head is None:
            raise ValueError(
                f"dynamic_shapes names {path!r}, which is not an input; the inputs are "
                f"{list(inputs)} (nested leaves by dotted path, e.g. 'name.0' or 'name.key')."
            )
        known = [p for p, _ in leaf_items(head, inputs[head])]
        if path not in known and dataclasses.is_dataclass(inputs[head]) and known == [head]:
            cls = type(inputs[head]).__name__
            raise ValueError(
                f"dynamic_shapes names {path!r}, but input {head!r} is a {cls} that torch's "
                f"pytree does not know, so torch.export cannot take it: register it first "
                f"with torch.export.register_dataclass({cls}), then name its fields."
            )
        if path not in known:
            raise ValueError(
                f"dynamic_shapes names {path!r}, but input {head!r} has no such leaf; its "
                f"leaves are {known}."
            )
        if head in direct:
            raise ValueError(
                f"dynamic_shapes names both {head!r} and its leaf {path!r}; use one form."
            )
        per_input.setdefault(head, [None] * len(known))[known.index(path)] = spec
    out = dict(direct)
    for head, specs in per_input.items():
        _, tree = pytree.tree_flatten(inputs[head])
        out[head] = _skeleton(tree, specs)
    return out


def _keyed(spec: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The user's spec as a dict keyed by input name (a sequence goes by position)."""
    names = list(inputs)
    if isinstance(spec, (list, tuple)):
        if len(spec) > len(names):
            raise ValueError(
                f"dynamic_shapes has {len(spec)} entries but the model takes {len(names)} "
                f"inputs ({names})."
            )
        return dict(zip(names, spec, strict=False))
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"dynamic_shapes must be a dict keyed by input name or a sequence with one entry "
            f"per input, got {type(spec).__name__}."
        )
    unknown = [k for k in spec if not isinstance(k, str)]
    if unknown:
        raise ValueError(f"dynamic_shapes keys must be input names (str), got {unknown}.")
    direct = {k: v for k, v in spec.items() if k in inputs}
    paths = {k: v for k, v in spec.items() if k not in inputs}
    if paths:
        missing = [k for k in paths if "." not in k]
        if missing:
            raise ValueError(
                f"dynamic_shapes names inputs {sorted(missing)} that the model does not take; "
                f"its inputs are {names}."
            )
        direct = _by_path(inputs, paths, direct)
    return direct


def _to_torch(node: Any) -> Any:
    """torch.export's spec: names and dynamic ints become ``Dim.DYNAMIC`` (all it takes on ints).

    ``Dim.AUTO`` on an int stays (torch makes it a SymInt unless the code fixes it).
    """
    if isinstance(node, DynamicInt):
        return Dim.AUTO if node.spec is Dim.AUTO else Dim.DYNAMIC
    if isinstance(node, str):
        return Dim.DYNAMIC
    if isinstance(node, dict):
        return {k: _to_torch(v) for k, v in node.items()}
    if isinstance(getattr(type(node), "_fields", None), tuple):  # a namedtuple spec
        return type(node)(*(_to_torch(v) for v in node))
    if isinstance(node, (list, tuple)):
        return type(node)(_to_torch(v) for v in node)
    return node


def resolve_dynamic_shapes(
    dynamic_shapes: Any,
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> DynamicShapes | None:
    """Check the user's ``dynamic_shapes`` against the example inputs; build torch's.

    Raises:
        ValueError: A key that is not an input, an axis out of range or given twice, an
            empty name, or a spec whose structure does not fit its input.
    """
    if dynamic_shapes is None:
        return None
    inputs = named_inputs(signature, args, kwargs)
    keyed = _keyed(dynamic_shapes, inputs)
    checked = {
        name: _check(name, keyed[name], value) if keyed.get(name) is not None else _static(value)
        for name, value in inputs.items()
    }
    names = {name: named_form(checked[name], value) for name, value in inputs.items()}
    if signature is None:
        return DynamicShapes(_to_torch(checked), names)
    bound = signature.bind(*args, **kwargs).arguments
    torch_spec: dict[str, Any] = {}
    for name, value in bound.items():
        if signature.parameters[name].kind == _VAR_KEYWORD:
            torch_spec[name] = {k: _to_torch(checked[k]) for k in value}
        else:
            torch_spec[name] = _to_torch(checked[name])
    return DynamicShapes(torch_spec, names)


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
            shapes[path] = {
                int(a): GeneratedDimName(f"{key}_dynamic_axes_{i + 1}") for i, a in enumerate(axes)
            }
    return shapes
