"""Dynamic dimensions the model ties together, found in the captured program and recorded.

``torch.cat([tokens, cache], 1)`` feeding ``nn.Linear(32, ...)`` holds only when
``tokens + cache = 32``. torch.export finds that and captures ``cache``'s length as
``32 - s0``; with two independent ``Dim`` s it refuses instead and suggests ``c = 32 - t``
(which ``Dim`` arithmetic cannot even write: a negative coefficient). The capture's repair
makes such dims plain dynamic (see ``capture/_shape_fixes.py``) so that torch derives the
relation itself; here each input axis whose size is an expression of other inputs' sizes
becomes a :class:`~onnx_export.adapters.DimRelation` of the adapter spec (the call-time
check), an OXE0020 SARIF warning, and a ``DimensionRelationWarning`` the user sees. Only
exact linear relations with integer coefficients are kept.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from onnx_export.adapters import AdapterSpec, DimRelation
from onnx_export.capture._call import AxisTie
from onnx_export.capture._user_code import warn_at_user_line
from onnx_export.diagnostics import DiagnosticContext, rules
from onnx_export.errors import DimensionRelationWarning
from onnx_export.translation._naming import dim_names_from_program, graph_names

__all__ = [
    "FoundRelation",
    "find_relations",
    "record_relations",
    "warn_relations",
    "with_relations",
]

#: The origin recorded with each relation.
ORIGIN = "found by torch.export in the model's code"


@dataclasses.dataclass(frozen=True)
class FoundRelation:
    """One relation and where its dimensions are.

    Attributes:
        relation: The relation between dimension names.
        axis: The dependent axis (``"cache[1]"``).
        roots: The axes of each term's dimension (``{"t": "tokens[1]"}``).
        tie: The same relation between ``(input path, axis)`` pairs.
    """

    relation: DimRelation
    axis: str
    roots: Mapping[str, str]
    tie: AxisTie

    def text(self) -> str:
        """``c = 32 - t`` with each dimension's axis: for messages."""
        where = ", ".join(f"{n} is {a}" for n, a in self.roots.items())
        if self.relation.dim == self.relation.formula():
            return f"{self.axis} = {self.relation.formula()} ({where})"
        return f"{self.relation.text()} ({self.relation.dim} is {self.axis}, {where})"


def _user_inputs(program: ExportedProgram) -> list[torch.fx.Node]:
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    return [
        node
        for node, spec in zip(placeholders, program.graph_signature.input_specs, strict=True)
        if spec.kind == InputKind.USER_INPUT
    ]


def _linear(expr: Any, symbols: Sequence[Any]) -> tuple[list[tuple[Any, int]], int] | None:
    """``([(symbol, coefficient)], constant)`` of an integer-linear ``expr``, else ``None``."""
    try:
        poly = expr.as_poly(*symbols)
    except Exception:  # sympy cannot read it as a polynomial (a FloorDiv, a Max): not linear
        return None
    if poly is None or poly.total_degree() > 1 or not all(c.is_Integer for c in poly.coeffs()):
        return None
    terms = [(s, int(poly.coeff_monomial(s))) for s in symbols]
    return [(s, c) for s, c in terms if c], int(poly.coeff_monomial(1))


def _with_names(expr: str, by_symbol: Mapping[str, str]) -> str:
    """``expr`` with each symbol replaced by its dim's name: ``32 - s27`` -> ``32 - t``."""
    return re.sub(r"\b[a-z]+\d+\b", lambda m: by_symbol.get(m.group(0), m.group(0)), expr)


def find_relations(
    program: ExportedProgram, module: torch.nn.Module, names: Any
) -> tuple[list[FoundRelation], list[str]]:
    """The linear relations between input dimensions, and the other relations (texts).

    Args:
        program: The captured program.
        module: The captured module (its ``forward`` names the inputs).
        names: The user's dynamic shapes by input name (``DynamicShapes.names``).
    """
    paths, _, _ = graph_names(module, program)
    by_symbol = dim_names_from_program(program, names, paths).by_symbol
    axes: dict[Any, tuple[str, int]] = {}
    dependent: list[tuple[Any, str, int]] = []
    for path, node in zip(paths, _user_inputs(program), strict=False):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for axis, size in enumerate(val.shape):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if expr.is_Symbol:
                axes.setdefault(expr, (path, axis))
            elif expr.free_symbols:
                dependent.append((expr, path, axis))
    found: dict[str, FoundRelation] = {}
    other: list[str] = []  # not linear: the adapter cannot check them
    for expr, path, axis in dependent:
        symbols = sorted(expr.free_symbols, key=str)
        if not all(s in axes for s in symbols):
            continue  # tied to a Python int input or an inner size: no axis to name
        named = _with_names(str(expr), by_symbol)
        name = by_symbol.get(str(expr), named)  # the graph's name: the user's, or the formula
        linear = _linear(expr, symbols)
        if linear is None:
            other.append(f"{path}[{axis}] = {named}")
            continue
        terms, constant = linear
        relation = DimRelation(
            name,
            tuple((by_symbol.get(str(s), str(s)), c) for s, c in terms),
            constant,
            ORIGIN,
        )
        increasing = len(terms) == 1 and terms[0][1] > 0
        if (name == relation.formula() and increasing) or relation.dim in found:
            continue  # the name itself is the formula (a derived Dim): checked by name
        roots = {by_symbol.get(str(s), str(s)): f"{axes[s][0]}[{axes[s][1]}]" for s, _ in terms}
        tie = AxisTie((path, axis), tuple((axes[s], c) for s, c in terms), constant)
        found[relation.dim] = FoundRelation(relation, f"{path}[{axis}]", roots, tie)
    return list(found.values()), other


def with_relations(spec: AdapterSpec, found: Sequence[FoundRelation]) -> AdapterSpec:
    """``spec`` with the relations, checked on each call."""
    if not found:
        return spec
    names = {d for leaf in spec.inputs if leaf.tensor is not None for d in leaf.tensor.shape}
    kept = tuple(
        f.relation
        for f in found
        if f.relation.dim in names and all(n in names for n, _ in f.relation.terms)
    )
    return dataclasses.replace(spec, relations=kept) if kept else spec


def record_relations(context: DiagnosticContext, found: Sequence[FoundRelation]) -> None:
    """An OXE0020 warning per relation: the dimension, the relation, and what follows."""
    for f in found:
        context.emit(
            rules.DYNAMIC_SHAPE_FIXED,
            message_args={
                "dim": f.axis,
                "change": f"{f.relation.dim!r} -> {f.relation.text()}",
                "reason": f"the model ties them ({f.text()}; torch.export found it); the "
                "file refuses calls whose sizes break it with an InputShapeError",
            },
        )


def warn_relations(found: Sequence[FoundRelation]) -> None:
    """One ``DimensionRelationWarning`` per relation, after the export's recording block."""
    for f in found:
        warn_at_user_line(
            f"{f.axis} is not independent: the model ties it to other dynamic dimensions, "
            f"{f.text()}. The exported model holds for sizes that keep this relation and "
            "refuses others with an InputShapeError.",
            DimensionRelationWarning,
        )
