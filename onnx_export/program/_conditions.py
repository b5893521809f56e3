"""Comparisons of several dynamic sizes the capture took a branch on: checked on each call.

transformers pads an attention mask shorter than the past plus the new tokens and slices a
longer one (``masking_utils``); a capture traces the branch its example takes and records
the comparison as a guard over several sizes (``s53 > s31 + s70``). Such a guard is a
:class:`~onnx_export.adapters.DimCondition` of the adapter spec, written over the file's
dimension names (``total > past + seq``): the file refuses calls that break it, the
export's second sizes keep it (:mod:`onnx_export.capture._resize`), and the edge probe runs
the smallest sizes that keep it (:mod:`._probe`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.adapters import AdapterSpec, DimCondition
from onnx_export.adapters._dim_conditions import ConditionSyntaxError
from onnx_export.capture._specialized import RangeGuard
from onnx_export.program._adapter import guard_origin
from onnx_export.translation._translate import AXIS_RANGES_KEY

__all__ = ["with_conditions", "condition_axes"]

_SYMBOL = re.compile(r"\bs\d+\b")


def _names_by_symbol(spec: AdapterSpec, model: ir.Model) -> dict[str, str]:
    """Torch's symbol of each dynamic input axis -> the file's name of that dimension."""
    shapes = {
        leaf.tensor.name: leaf.tensor.shape for leaf in spec.inputs if leaf.tensor is not None
    }
    found: dict[str, str] = {}
    for value in model.graph.inputs:
        shape = shapes.get(str(value.name))
        for axis, symbol, _low, _high in value.meta.get(AXIS_RANGES_KEY, ()):
            if shape is None or axis >= len(shape):
                continue
            name = shape[axis]
            if isinstance(name, str) and name.isidentifier():
                found.setdefault(str(symbol), name)
    return found


def _sympy_form(expression: str, names: Sequence[str]) -> Any:
    """``expression`` read by sympy over positive integer sizes, or ``None``."""
    import sympy  # type: ignore[import-untyped]  # sympy ships no stubs

    symbols: dict[str, object] = {n: sympy.Symbol(n, integer=True, positive=True) for n in names}
    calls = {"Mod": sympy.Mod, "PythonMod": sympy.Mod, "Max": sympy.Max, "Min": sympy.Min}
    calls.update({"Eq": sympy.Eq, "Ne": sympy.Ne, "FloorDiv": lambda a, b: sympy.floor(a / b)})
    try:
        return sympy.sympify(expression, locals={**symbols, **calls})
    except Exception:  # a form sympy cannot read
        return None


def _compared(condition: DimCondition, sizes: Mapping[str, int]) -> DimCondition | None:
    """The condition in its simplest form, if it compares two or more sizes and may fail.

    Sizes of one named dimension merge (``(batch*total)//batch`` is ``total``). Left out:
    a condition that holds at every positive size (``Eq(past + seq, past + seq)``), and one
    about a single size once simplified (``Eq(past + seq, past + 1)``: the example's size
    1, which ranges and the edge probe handle).
    """
    import sympy

    expr = _sympy_form(condition.expression, condition.names)
    if expr is None:
        return condition  # the adapter reads it as it is
    if expr is sympy.true or expr is sympy.false:
        return None
    if not isinstance(expr, sympy.core.relational.Relational):
        return condition
    difference = sympy.expand(expr.lhs - expr.rhs)
    if len(difference.free_symbols) < 2:
        return None
    for text in (_sides(expr, difference), str(expr)):
        try:
            simpler = DimCondition(text, condition.origin)
        except ConditionSyntaxError:
            continue  # sympy's spelling (floor, a fraction) is not the adapter's
        if simpler.holds(sizes) is True:
            return simpler
    return condition


def _sides(expr: Any, difference: Any) -> str:
    """``past + seq <= total`` for ``past + seq - total <= 0``: each term on its positive side."""
    import sympy

    terms = sympy.Add.make_args(difference)
    left = sympy.Add(*(t for t in terms if not t.could_extract_minus_sign()))
    right = sympy.Add(*(-t for t in terms if t.could_extract_minus_sign()))
    op = expr.rel_op
    if left.is_number and not right.is_number:  # 4095 > past + seq: past + seq < 4095
        left, right = right, left
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
    if op in ("==", "!="):
        return f"{'Eq' if op == '==' else 'Ne'}({left}, {right})"
    return f"{left} {op} {right}"


_SIZE_SOURCE = re.compile(r"^L(?P<keys>(?:\[[^\]]+\])+)\.size\(\)\[(?P<axis>\d+)\]$")
_KEY = re.compile(r"\[(?:'(?P<name>[^']*)'|(?P<index>\d+))\]")


def _by_source(guard: RangeGuard, spec: AdapterSpec) -> dict[str, str]:
    """The guard's symbols named through their sources (``L['x'].size()[1]``).

    A guard's text may name a symbol torch later merged into another (the batch of the
    ids and of the mask, found equal after the guard): its source still names the axis.
    """
    shapes = {
        leaf.tensor.name: leaf.tensor.shape for leaf in spec.inputs if leaf.tensor is not None
    }
    found: dict[str, str] = {}
    symbols = guard.symbol.split(",")
    sources = guard.source.split(";")
    if len(symbols) != len(sources):
        return found
    for symbol, source in zip(symbols, sources, strict=True):
        match = _SIZE_SOURCE.match(source)
        if match is None:
            continue
        keys = [k.group("name") or k.group("index") for k in _KEY.finditer(match["keys"])]
        if keys and keys[0] == "kwargs":
            keys = keys[1:]  # forward's **kwargs: the graph names the keyword
        shape = shapes.get(".".join(keys))
        axis = int(match["axis"])
        if shape is not None and axis < len(shape):
            name = shape[axis]
            if isinstance(name, str) and name.isidentifier():
                found[symbol] = name
    return found


def _named(names: Mapping[str, str], match: re.Match[str]) -> str:
    return names[match.group(0)]


def with_conditions(
    spec: AdapterSpec,
    model: ir.Model,
    guards: Sequence[RangeGuard],
    sizes: Mapping[str, int],
) -> tuple[AdapterSpec, frozenset[str]]:
    """``spec`` with a condition per guard of the capture that compares several input sizes.

    Returns the spec and the texts of the guards it checks (a range torch derived from one
    of them is left to the condition).

    Args:
        spec: The adapter spec.
        model: The translated model; its inputs carry their axes' torch symbols.
        guards: The capture's guards (the ``joint`` ones are read).
        sizes: Each dimension's example size, by its name in the file: a condition the
            example does not keep (a guard over sizes the names merge) is left out.
    """
    joint = [g for g in guards if g.kind == "joint"]
    if not joint:
        return spec, frozenset()
    names = _names_by_symbol(spec, model)
    kept: dict[str, DimCondition] = {c.expression: c for c in spec.conditions}
    texts: set[str] = set()
    for guard in joint:
        symbols = set(_SYMBOL.findall(guard.guard))
        named = {**names, **_by_source(guard, spec)}
        if not symbols or not symbols <= named.keys():
            continue  # a size with no input axis to read it from
        expression = _SYMBOL.sub(functools.partial(_named, named), guard.guard)
        try:
            condition = DimCondition(expression, guard_origin(guard))
        except ConditionSyntaxError:
            continue  # a form the adapter cannot evaluate
        if len(set(condition.names)) < 2 or condition.holds(sizes) is not True:
            continue  # one size (its range says it), or not the example's branch
        simplest = _compared(condition, sizes)
        if simplest is None or not simplest.linear:
            # Always true, about one size, or a product of sizes: what a view's element
            # count or a broadcast over a size-1 example adds (``8*seq*(past + seq) <= ...``),
            # which the graph does not branch on: the second sizes and the probe check those.
            continue
        kept.setdefault(simplest.expression, simplest)
        texts.add(guard.guard)
    if not kept:
        return spec, frozenset()
    return dataclasses.replace(spec, conditions=tuple(kept.values())), frozenset(texts)


def condition_axes(spec: AdapterSpec | None) -> dict[str, tuple[str, int]]:
    """Each dimension a condition reads -> its first ``(input, axis)``: to size a call by."""
    if spec is None or not spec.conditions:
        return {}
    wanted = {name for c in spec.conditions for name in c.names}
    found: dict[str, tuple[str, int]] = {}
    for leaf in spec.inputs:
        if leaf.tensor is None:
            continue
        for axis, dim in enumerate(leaf.tensor.shape):
            if isinstance(dim, str) and dim in wanted:
                found.setdefault(dim, (leaf.tensor.name, axis))
    return found
