"""Conditions between dynamic dimensions that a file holds only under: ``total >= past + seq``.

While a model is captured, its code compares sizes (transformers pads an attention mask
shorter than the past plus the new tokens, and slices a longer one); torch.export traces
the branch the example takes and records the comparison as a guard over several sizes.
The file holds only where that comparison comes out as it did for the example, so the
adapter checks it on each call (:class:`DimCondition`), and the export's checks pick their
other sizes where it holds.

An expression is read with :mod:`ast` and evaluated by a small interpreter over integers:
names of dimensions, integer constants, ``+ - * // %``, ``Mod``/``PythonMod``/``FloorDiv``/
``Max``/``Min`` calls, and one comparison. Nothing in it is executed as Python.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["DimCondition", "parse_condition", "ConditionSyntaxError"]

_Sizes = Mapping[str, int]
_Fn = Callable[[_Sizes], int]

_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_CALLS: dict[str, Callable[[int, int], int]] = {
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
    "FloorDiv": lambda a, b: a // b,
    "Max": max,
    "Min": min,
}
_COMPARE: dict[type, tuple[str, Callable[[int, int], bool]]] = {
    ast.Lt: ("<", lambda a, b: a < b),
    ast.LtE: ("<=", lambda a, b: a <= b),
    ast.Gt: (">", lambda a, b: a > b),
    ast.GtE: (">=", lambda a, b: a >= b),
    ast.Eq: ("==", lambda a, b: a == b),
    ast.NotEq: ("!=", lambda a, b: a != b),
}


class ConditionSyntaxError(ValueError):
    """An expression outside the grammar conditions are written in."""


@dataclass(frozen=True)
class _Parsed:
    left: _Fn
    right: _Fn
    compare: Callable[[int, int], bool]
    names: tuple[str, ...]
    linear: bool


def _term(node: ast.expr, names: list[str]) -> tuple[_Fn, bool]:
    """The function of sizes ``node`` computes, and whether it is linear in the sizes."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return (lambda _s: value), True
    if isinstance(node, ast.Name):
        name = node.id
        if name not in names:
            names.append(name)
        return (lambda s: s[name]), True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner, linear = _term(node.operand, names)
        if isinstance(node.op, ast.USub):
            return (lambda s: -inner(s)), linear
        return inner, linear
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        op = _BINARY[type(node.op)]
        left, left_linear = _term(node.left, names)
        right, right_linear = _term(node.right, names)
        constant = isinstance(node.left, ast.Constant) or isinstance(node.right, ast.Constant)
        linear = (
            left_linear
            and right_linear
            and (
                isinstance(node.op, (ast.Add, ast.Sub))
                or (isinstance(node.op, ast.Mult) and constant)
            )
        )
        return (lambda s: op(left(s), right(s))), linear
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS
        and len(node.args) == 2
        and not node.keywords
    ):
        call = _CALLS[node.func.id]
        first, _ = _term(node.args[0], names)
        second, _ = _term(node.args[1], names)
        return (lambda s: call(first(s), second(s))), False
    raise ConditionSyntaxError(f"{ast.dump(node)[:80]} is not in a condition's grammar")


@functools.lru_cache(maxsize=512)
def _parse(expression: str) -> _Parsed:
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError as e:
        raise ConditionSyntaxError(f"{expression!r} does not parse: {e.msg}") from None
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and len(tree.args) == 2:
        # sympy's spelling of an equality: Eq(a, b), Ne(a, b)
        ops = {"Eq": ast.Eq(), "Ne": ast.NotEq()}
        if tree.func.id in ops and not tree.keywords:
            tree = ast.Compare(tree.args[0], [ops[tree.func.id]], [tree.args[1]])
    if not isinstance(tree, ast.Compare) or len(tree.ops) != 1 or type(tree.ops[0]) not in _COMPARE:
        raise ConditionSyntaxError(f"{expression!r} is not one comparison of two sizes")
    names: list[str] = []
    left, left_linear = _term(tree.left, names)
    right, right_linear = _term(tree.comparators[0], names)
    _, compare = _COMPARE[type(tree.ops[0])]
    return _Parsed(left, right, compare, tuple(names), left_linear and right_linear)


def parse_condition(expression: str) -> tuple[str, ...]:
    """The dimension names in ``expression``; raises ``ConditionSyntaxError`` outside the grammar.

    Example:
        >>> parse_condition("total >= past + seq")
        ('total', 'past', 'seq')
    """
    return _parse(expression).names


@dataclass(frozen=True)
class DimCondition:
    """A comparison of dynamic dimensions the exported file holds only under.

    The model's code compared these sizes while it was captured, and the file has only the
    branch the example took; the adapter refuses, with an ``InputShapeError`` naming the
    condition and the model's line, a call whose sizes break it.

    Attributes:
        expression: One comparison over dimension names as the input shapes write them,
            e.g. ``"total >= past + seq"``: integers, ``+ - * // %``, ``Max``/``Min``/
            ``Mod``/``FloorDiv`` calls.
        origin: Where it comes from, for messages (the model's line).

    Example:
        >>> c = DimCondition("total >= past + seq", "the model's code at masking.py:229")
        >>> c.holds({"total": 5, "past": 3, "seq": 2}), c.holds({"total": 4, "past": 3, "seq": 2})
        (True, False)
        >>> c.names, c.linear
        (('total', 'past', 'seq'), True)
    """

    expression: str
    origin: str = ""

    def __post_init__(self) -> None:
        _parse(self.expression)  # raises ConditionSyntaxError outside the grammar

    @property
    def names(self) -> tuple[str, ...]:
        """The dimension names the condition reads, in order of first appearance."""
        return _parse(self.expression).names

    @property
    def linear(self) -> bool:
        """Whether both sides are integer-linear in the sizes (``total >= past + seq``)."""
        return _parse(self.expression).linear

    def holds(self, sizes: Mapping[str, int]) -> bool | None:
        """Whether the sizes keep the condition; ``None`` when a size is missing.

        A size that makes the expression undefined (a division by zero) breaks it.
        """
        parsed = _parse(self.expression)
        if any(name not in sizes for name in parsed.names):
            return None
        try:
            return bool(parsed.compare(parsed.left(sizes), parsed.right(sizes)))
        except ZeroDivisionError:
            return False

    def difference(self, sizes: Mapping[str, int]) -> int | None:
        """Left side minus right side at ``sizes`` (its sign says which side is larger)."""
        parsed = _parse(self.expression)
        if any(name not in sizes for name in parsed.names):
            return None
        try:
            return parsed.left(sizes) - parsed.right(sizes)
        except ZeroDivisionError:
            return None
