"""Repair dynamic shapes the way torch.export suggests, so a capture works the first time.

Two things make a dimension the user marked dynamic fail to capture:

- **An example size of 1.** torch.export specialises sizes 0 and 1 (a size-1 dimension
  broadcasts, so its code may differ). A dimension the user calls dynamic is meant to take
  any size, so the capture is traced *size-obliviously* (torch's
  ``backed_size_oblivious``): the size-1 example is treated like any other size, which
  gives the general graph. This is decided before capture (no failed attempt) when a
  dynamic dimension's example is 1, and also when torch's error names a size-1
  specialisation. Making up a larger example instead would need to know how the inputs
  relate (a mask's length, a cache's size), which only the user knows.
- **A constraint violation.** The model ties the dimension to a constant or to another
  dimension. torch.export says how (``Suggested fixes:``); the spec is refined as it
  suggests (``refine_dynamic_shapes_from_suggested_fixes`` for ``Dim`` objects; for
  ``Dim.DYNAMIC``, which gets no suggestion, the specialised dimension becomes static)
  and the capture runs again. Each change is reported, naming the input, the axis and
  torch's reason.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.export import Dim

from onnx_export.capture._spec_containers import container
from onnx_export.capture._specialized import Specialization

__all__ = ["Repair", "StaticDim", "dynamic_size_one", "suggest_repair", "user_dims"]

_SOURCE = re.compile(
    r"(?:L|inputs)\['(?P<name>[^']+)'\](?P<keys>(?:\[[^\]]+\])*)"
    r"(?:\.size\(\)|\.shape)\[(?P<axis>\d+)\]"
)
_MARKED = re.compile(
    r"You marked (?P<what>.+?) as dynamic but your code specialized it"
    r"|inferred a static shape of \d+ for dimension (?P<dim>\S+?)\.?$",
    re.MULTILINE,
)
_HINT_ONE = re.compile(r"specialized due to hint of 1|specialized it to be a constant \(1\)")


@dataclasses.dataclass(frozen=True)
class StaticDim:
    """A dimension the user asked to be dynamic that the model's code fixes to a constant.

    Attributes:
        input: The input as the user names it (``"x"``, ``"extras.0"``).
        axis: The axis.
        requested: What the user asked for (``"dynamic"``, ``"Dim('n')"``).
        size: The constant the code fixes it to, when torch said.
        reason: torch.export's explanation.
        location: The model's line that fixed it (``"model.py:12 (return x.view(2, -1))"``),
            or ``""`` when torch did not say.
        fix: torch.export's suggested fix, or the equivalent change of ``dynamic_shapes``.
    """

    input: str
    axis: int
    requested: str
    size: int | None
    reason: str
    location: str
    fix: str

    def __str__(self) -> str:
        size = "" if self.size is None else f" to {self.size}"
        at = f" at {self.location}" if self.location else ""
        return (
            f"{self.input}[{self.axis}] ({self.requested}) is fixed{size} by the model's "
            f"code{at}: {self.reason.rstrip('.')}; torch.export's suggested fix: {self.fix}"
        )


@dataclasses.dataclass(frozen=True)
class Repair:
    """A changed capture to try: new dynamic shapes, size-oblivious or not, and why.

    ``made_static`` lists the requested dynamic dimensions the new shapes make static.
    """

    dynamic_shapes: Any
    size_oblivious: bool
    notes: tuple[str, ...]
    made_static: tuple[StaticDim, ...] = ()


def _is_dynamic(dim: Any) -> bool:
    if dim is None or isinstance(dim, int):
        return False
    return dim is not Dim.STATIC


def _axes(spec: Any) -> Iterator[tuple[int, Any]]:
    if isinstance(spec, dict):
        yield from ((k, v) for k, v in spec.items() if isinstance(k, int))
    elif isinstance(spec, (list, tuple)):
        yield from enumerate(spec)


def _walk_leaves(spec: Any, value: Any, path: str) -> Iterator[tuple[str, int, Any, int]]:
    """``(path, axis, dim, example size)`` for each axis spec matched to a tensor."""
    if spec is None:
        return
    if isinstance(value, torch.Tensor):
        for axis, dim in _axes(spec):
            if 0 <= axis < value.dim():
                yield path, axis, dim, int(value.shape[axis])
        return
    node = container(value)
    if node is None:
        return
    for i, (key, text, child) in enumerate(zip(node.keys, node.texts, node.children, strict=True)):
        if isinstance(spec, dict):
            inner = spec.get(key, spec.get(text))
        elif isinstance(spec, (list, tuple)) and i < len(spec):
            inner = spec[i]
        else:
            inner = None
        yield from _walk_leaves(inner, child, f"{path}.{text}")


def _leaf_specs(spec: Any, path: str, with_none: bool = False) -> Iterator[tuple[str, Any]]:
    """``(dotted path, per-tensor spec)`` of each leaf spec in a nested spec.

    ``with_none``: ``None`` leaves (static tensors) too, so that positions line up with
    the value's flattened leaves.
    """
    if spec is None:
        if with_none:
            yield path, spec
        return
    if _is_axes_spec(spec):
        yield path, spec
    elif isinstance(spec, (list, tuple)):
        for i, s in enumerate(spec):
            yield from _leaf_specs(s, f"{path}.{i}", with_none)
    elif isinstance(spec, dict):
        for k, s in spec.items():
            yield from _leaf_specs(s, f"{path}.{k}", with_none)


def _is_axes_spec(spec: Any) -> bool:
    if isinstance(spec, dict):
        return bool(spec) and all(isinstance(k, int) and not isinstance(k, bool) for k in spec)
    return isinstance(spec, (list, tuple)) and not any(
        isinstance(s, (dict, list, tuple)) for s in spec
    )


def user_dims(names: Mapping[str, Any]) -> dict[tuple[str, int], Any]:
    """The user's dim of each dynamic axis, by ``(dotted input path, axis)``.

    Example:
        >>> user_dims({"x": {0: "batch"}, "extras": [None, {1: "n"}]})
        {('x', 0): 'batch', ('extras.1', 1): 'n'}
    """
    dims: dict[tuple[str, int], Any] = {}
    for name, spec in names.items():
        for path, axes in _leaf_specs(spec, name):
            for axis, dim in _axes(axes):
                if _is_dynamic(dim):
                    dims[(path, axis)] = dim
    return dims


def dynamic_size_one(names: Mapping[str, Any], inputs: Mapping[str, Any]) -> list[str]:
    """Inputs with a dimension marked dynamic whose example size is 1 (``"x[0]"``)."""
    return [
        f"{path}[{axis}]"
        for name, spec in names.items()
        for path, axis, dim, size in _walk_leaves(spec, inputs.get(name), name)
        if size == 1 and _is_dynamic(dim)
    ]


def _describe(dim: Any) -> str:
    if dim is None or dim is Dim.STATIC:
        return "static"
    if isinstance(dim, int):
        return f"static {dim}"
    name = getattr(dim, "__name__", None)
    if name and type(dim).__name__ != "DimHint":
        low, high = getattr(dim, "min", None), getattr(dim, "max", None)
        unbounded = low in (None, 0) and str(high) in ("None", "int_oo")
        bounds = "" if unbounded else f" in [{low}, {high}]"
        return f"Dim({name!r}){bounds}"
    return "dynamic"


def _changes(old: Any, new: Any, path: list[Any]) -> Iterator[tuple[list[Any], Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            yield from _changes(old[key], new.get(key), [*path, key])
    elif isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            yield from _changes(a, b, [*path, i])
    elif _describe(old) != _describe(new):
        yield path, old, new


_EXPLAINED = ("You marked", "The values of", "Not all", "Received user-specified")


def _reason(message: str, old: Any, source: str) -> str:
    name = getattr(old, "__name__", None)
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines()]
    explained = [t for t in lines if t.startswith(_EXPLAINED)]
    for text in [*explained, *lines]:
        if (name and f"{name} " in f"{text} ") or (source and source in text):
            return text.split(" If you're using")[0]
    return explained[0].split(" If you're using")[0] if explained else "torch.export's fix"


def _torch_source(path: Sequence[Any]) -> str:
    """Torch's name of an axis: ``["x", "k", 0]`` is ``L['x']['k'].size()[0]``."""
    keys = "".join(f"[{k!r}]" for k in path[:-1])
    return f"L{keys}.size()[{path[-1]}]"


def _suggested_fix(message: str, before: Any, where: str) -> str:
    name = getattr(before, "__name__", None)
    _, found, tail = message.partition("Suggested fixes:")
    if found and name and type(before).__name__ != "DimHint":
        for line in tail.strip("\n").splitlines():
            if line.strip().startswith(f"{name} ="):
                return f"{line.strip()} (use the size, or Dim.STATIC, for {where})"
    return f"leave {where} static: drop it from dynamic_shapes or give Dim.STATIC (or Dim.AUTO)"


def _constant(reason: str, after: Any) -> int | None:
    if isinstance(after, int) and not isinstance(after, bool):
        return after
    match = re.search(r"constant \((\d+)\)|static shape of (\d+)", reason)
    return int(match.group(1) or match.group(2)) if match else None


def _notes(
    old: Any,
    new: Any,
    message: str,
    var_keyword: Sequence[str],
    sources: Mapping[str, str],
    found: Mapping[str, Specialization],
    display: Mapping[str, str],
) -> tuple[list[str], list[StaticDim]]:
    notes: list[str] = []
    static: list[StaticDim] = []
    for path, before, after in _changes(old, new, []):
        parts = [str(p) for p in path[:-1]]
        if parts and parts[0] in var_keyword:  # **kwargs entries go by their own name
            parts = parts[1:]
        named = display.get(_torch_source(path).partition(".size()")[0])
        if named is not None:  # a namedtuple's or dataclass's field: by its name
            parts = named.split(".")
        where = f"{'.'.join(parts)}[{path[-1]}]"
        full = f"{'.'.join(map(str, path[:-1]))}[{path[-1]}]"
        why = _reason(message, before, sources.get(full, ""))
        notes.append(f"{where}: {_describe(before)} -> {_describe(after)} ({why})")
        if _is_dynamic(before) and _describe(after).startswith("static"):
            seen = found.get(_torch_source(path))
            size = _constant(why, after) if seen is None else seen.value
            location = "" if seen is None else seen.where()
            fix = _suggested_fix(message, before, where)
            static.append(
                StaticDim(".".join(parts), path[-1], _describe(before), size, why, location, fix)
            )
    return notes, static


def _set_static(spec: Any, keys: Sequence[Any], axis: int, to: Any = Dim.STATIC) -> bool:
    node = spec
    for key in keys:
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and key < len(node)
        ):
            node = node[key]
        else:
            return False
    if isinstance(node, dict) and axis in node and _is_dynamic(node[axis]):
        node[axis] = to
        return True
    if isinstance(node, list) and axis < len(node) and _is_dynamic(node[axis]):
        node[axis] = to
        return True
    return False


def _mutable(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {k: _mutable(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return [_mutable(v) for v in spec]
    return spec


def _restore(original: Any, mutated: Any) -> Any:
    """``mutated`` with the tuples of ``original`` back (``_mutable`` made them lists)."""
    if isinstance(original, dict) and isinstance(mutated, dict):
        return {k: _restore(original.get(k), v) for k, v in mutated.items()}
    if isinstance(original, (list, tuple)) and isinstance(mutated, list):
        items = [_restore(o, m) for o, m in zip(original, mutated, strict=False)]
        if isinstance(getattr(type(original), "_fields", None), tuple):  # a namedtuple
            return type(original)(*items)
        return tuple(items) if isinstance(original, tuple) else items
    return mutated


def _static_by_source(spec: Any, message: str) -> tuple[Any, dict[str, str]]:
    """Make static each ``L['x'].size()[0]`` torch says was specialised to a constant."""
    fixed = _mutable(spec)
    sources: dict[str, str] = {}
    for marked in _MARKED.finditer(message):
        for match in _SOURCE.finditer(marked.group("what") or marked.group("dim")):
            keys: list[Any] = [match.group("name")]
            for raw in re.findall(r"\[([^\]]+)\]", match.group("keys")):
                keys.append(int(raw) if raw.isdigit() else raw.strip("'\""))
            axis = int(match.group("axis"))
            if _set_static(fixed, keys, axis):
                sources[f"{'.'.join(map(str, keys))}[{axis}]"] = match.group(0)
    return _restore(spec, fixed), sources


_RELATED = re.compile(
    r"The values of (?P<dep>.+?) = (?P<dep_source>\S+) must always be related to the values "
    r"of (?P<root>.+?) = (?P<root_source>\S+) by (?P<relation>.+?)\.?$",
    re.MULTILINE,
)


#: What a relation that is not linear with integer coefficients holds (``c = t//2``).
_NOT_LINEAR = re.compile(r"//|/|%|\*\*|Mod|FloorDiv|Max|Min|ceil|floor|sqrt")


def _named_dynamic(node: Any, names: set[str]) -> Any:
    """``node`` with every ``Dim`` named in ``names`` made ``Dim.DYNAMIC``."""
    if isinstance(node, dict):
        return {k: _named_dynamic(v, names) for k, v in node.items()}
    if isinstance(node, list):
        return [_named_dynamic(v, names) for v in node]
    if _is_dynamic(node) and getattr(node, "__name__", None) in names:
        return Dim.DYNAMIC
    return node


def _related(spec: Any, message: str) -> Any:
    """Make plain dynamic the dims torch says the model relates (``c = 32 - t``).

    ``Dim`` arithmetic holds only increasing relations (``2*t``, ``t + 1``), so torch
    cannot apply ``c = 32 - t`` to the spec. With both dims ``Dim.DYNAMIC`` torch derives
    the relation itself and captures the cache's length as ``32 - t``; the exporter then
    records it, checks it on each call, and warns (``program/_relations.py``).
    """
    fixed = _mutable(spec)
    names: set[str] = set()
    for related in _RELATED.finditer(message):
        if _NOT_LINEAR.search(related.group("relation").partition("=")[2]):
            continue  # not an exact linear relation: the file could not check it; refused
        for key in ("dep", "root"):
            if not related.group(key).startswith(("L[", "inputs[")):
                names.add(related.group(key))
        for source in (related.group("dep_source"), related.group("root_source")):
            for match in _SOURCE.finditer(source):
                keys: list[Any] = [match.group("name")]
                for raw in re.findall(r"\[([^\]]+)\]", match.group("keys")):
                    keys.append(int(raw) if raw.isdigit() else raw.strip("'\""))
                _set_static(fixed, keys, int(match.group("axis")), Dim.DYNAMIC)
    return _restore(spec, _named_dynamic(fixed, names))


def _refined(spec: Any, message: str) -> Any:
    head, found, tail = message.partition("Suggested fixes:")
    if not found:
        return spec
    block = []
    for line in tail.strip("\n").splitlines():
        if not line.strip():
            break
        block.append(line)
    refine: Callable[[str, Any], Any] = (
        torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes
    )
    try:
        return refine(head + found + "\n" + "\n".join(block), spec)
    except Exception:  # torch cannot apply its own suggestion: go on without it
        return spec


def _renamed(message: str, sources: Mapping[str, str]) -> str:
    """``message`` with torch's names of input sizes replaced by the spec's."""
    for theirs in sorted(sources, key=len, reverse=True):
        ours = sources[theirs]
        message = message.replace(f"{theirs}.size()", f"{ours}.size()")
        if theirs.startswith("L[") and ours.startswith("L["):  # inputs['x'].shape[0]
            message = message.replace(f"inputs{theirs[1:]}.shape", f"inputs{ours[1:]}.shape")
    return message


def suggest_repair(
    spec: Any,
    error: BaseException,
    *,
    size_oblivious: bool,
    var_keyword: Sequence[str] = (),
    found: Mapping[str, Specialization] | None = None,
    sources: Mapping[str, str] | None = None,
    display: Mapping[str, str] | None = None,
) -> Repair | None:
    """What to try after ``error``: a repaired spec, size-oblivious tracing, or nothing.

    ``found`` holds the specialisations recorded during the failed capture, by torch's
    source name, to name the model's line that fixed each dimension made static.
    ``sources`` renames torch's names of inputs to the spec's (``L['pair'].left`` ->
    ``L['pair'][0]``, strict capture's ``L['flat_args'][0]`` -> ``L['x']``); ``display``
    names the spec's leaves as the user does (``L['pair'][0]`` -> ``pair.left``).
    """
    message = _renamed(str(error), sources or {})
    if not size_oblivious and _HINT_ONE.search(message):
        note = "a dimension marked dynamic has example size 1: traced size-obliviously"
        return Repair(spec, True, (note,))
    refined = _refined(spec, message)
    if refined is spec and _RELATED.search(message):
        refined = _related(spec, message)
    fixed, sources = _static_by_source(refined, message)
    notes, static = _notes(spec, fixed, message, var_keyword, sources, found or {}, display or {})
    if not notes:
        return None
    return Repair(fixed, size_oblivious, tuple(notes), tuple(static))
