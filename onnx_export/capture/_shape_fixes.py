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

__all__ = ["Repair", "dynamic_size_one", "suggest_repair"]

_SOURCE = re.compile(
    r"(?:L|inputs)\['(?P<name>[^']+)'\](?P<keys>(?:\[[^\]]+\])*)"
    r"(?:\.size\(\)|\.shape)\[(?P<axis>\d+)\]"
)
_MARKED = re.compile(r"You marked (?P<what>.+?) as dynamic but your code specialized it")
_HINT_ONE = re.compile(r"specialized due to hint of 1|specialized it to be a constant \(1\)")


@dataclasses.dataclass(frozen=True)
class Repair:
    """A changed capture to try: new dynamic shapes, size-oblivious or not, and why."""

    dynamic_shapes: Any
    size_oblivious: bool
    notes: tuple[str, ...]


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
    elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
        for i, (s, v) in enumerate(zip(spec, value, strict=False)):
            yield from _walk_leaves(s, v, f"{path}.{i}")
    elif isinstance(value, dict) and isinstance(spec, dict):
        for k, s in spec.items():
            if k in value:
                yield from _walk_leaves(s, value[k], f"{path}.{k}")


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


def _reason(message: str, old: Any, source: str) -> str:
    name = getattr(old, "__name__", None)
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines()]
    explained = [t for t in lines if t.startswith(("You marked", "The values of", "Not all"))]
    for text in [*explained, *lines]:
        if (name and f"{name} " in f"{text} ") or (source and source in text):
            return text.split(" If you're using")[0]
    return explained[0].split(" If you're using")[0] if explained else "torch.export's fix"


def _notes(
    old: Any, new: Any, message: str, var_keyword: Sequence[str], sources: Mapping[str, str]
) -> list[str]:
    notes = []
    for path, before, after in _changes(old, new, []):
        parts = [str(p) for p in path[:-1]]
        if parts and parts[0] in var_keyword:  # **kwargs entries go by their own name
            parts = parts[1:]
        where = f"{'.'.join(parts)}[{path[-1]}]"
        full = f"{'.'.join(map(str, path[:-1]))}[{path[-1]}]"
        why = _reason(message, before, sources.get(full, ""))
        notes.append(f"{where}: {_describe(before)} -> {_describe(after)} ({why})")
    return notes


def _set_static(spec: Any, keys: Sequence[Any], axis: int) -> bool:
    node = spec
    for key in keys:
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and key < len(node)
        ):
            node = node[key]
        else:
            return False
    if isinstance(node, dict) and axis in node and _is_dynamic(node[axis]):
        node[axis] = Dim.STATIC
        return True
    if isinstance(node, list) and axis < len(node) and _is_dynamic(node[axis]):
        node[axis] = Dim.STATIC
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
        return tuple(items) if isinstance(original, tuple) else items
    return mutated


def _static_by_source(spec: Any, message: str) -> tuple[Any, dict[str, str]]:
    """Make static each ``L['x'].size()[0]`` torch says was specialised to a constant."""
    fixed = _mutable(spec)
    sources: dict[str, str] = {}
    for marked in _MARKED.finditer(message):
        for match in _SOURCE.finditer(marked.group("what")):
            keys: list[Any] = [match.group("name")]
            for raw in re.findall(r"\[([^\]]+)\]", match.group("keys")):
                keys.append(int(raw) if raw.isdigit() else raw.strip("'\""))
            axis = int(match.group("axis"))
            if _set_static(fixed, keys, axis):
                sources[f"{'.'.join(map(str, keys))}[{axis}]"] = match.group(0)
    return _restore(spec, fixed), sources


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


def suggest_repair(
    spec: Any, error: BaseException, *, size_oblivious: bool, var_keyword: Sequence[str] = ()
) -> Repair | None:
    """What to try after ``error``: a repaired spec, size-oblivious tracing, or nothing."""
    message = str(error)
    if not size_oblivious and _HINT_ONE.search(message):
        note = "a dimension marked dynamic has example size 1: traced size-obliviously"
        return Repair(spec, True, (note,))
    refined = _refined(spec, message)
    fixed, sources = _static_by_source(refined, message)
    notes = _notes(spec, fixed, message, var_keyword, sources)
    if not notes:
        return None
    return Repair(fixed, size_oblivious, tuple(notes))
