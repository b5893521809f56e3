"""Orthogonal polynomials (``special_*_polynomial_*``): an ONNX ``Loop`` over the degree.

``n`` is a tensor, so the degree varies per element: the loop runs the three-term
recurrence up to the largest degree (at most ``_MAX_DEGREE``) for every element and
keeps, for each, the term of its own degree. The closed forms and edge cases ATen uses
(``|x| = 1``, trigonometric forms for large degrees, negative degrees) are applied after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import cast_to, const, loop, op
from onnx_export.ops._opset import Opset
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.math import compute_dtype, to_result

__all__ = ["Step"]

_MAX_DEGREE = 8192
_INT64 = ir.DataType.INT64

# step(sub_op, k, y, p_prev, p_cur) -> p_next, with k the degree of p_cur (float).
Step = Callable[[Any, Any, Any, Any, Any], Any]


def _chebyshev_step(
    sub: Opset, k: ir.Value, y: ir.Value, prev: ir.Value, cur: ir.Value
) -> ir.Value:
    return sub.Sub(sub.Mul(sub.Add(y, y), cur), prev)


def _hermite_step(sub: Opset, k: ir.Value, y: ir.Value, prev: ir.Value, cur: ir.Value) -> ir.Value:
    return sub.Sub(sub.Mul(sub.Add(y, y), cur), sub.Mul(sub.Add(k, k), prev))


def _hermite_e_step(
    sub: Opset, k: ir.Value, y: ir.Value, prev: ir.Value, cur: ir.Value
) -> ir.Value:
    return sub.Sub(sub.Mul(y, cur), sub.Mul(k, prev))


def _laguerre_step(sub: Opset, k: ir.Value, y: ir.Value, prev: ir.Value, cur: ir.Value) -> ir.Value:
    one = sub.CastLike(sub.Constant(value_float=1.0), y)
    factor = sub.Sub(sub.Add(sub.Add(k, k), one), y)
    return sub.Div(sub.Sub(sub.Mul(factor, cur), sub.Mul(k, prev)), sub.Add(k, one))


def _legendre_step(sub: Opset, k: ir.Value, y: ir.Value, prev: ir.Value, cur: ir.Value) -> ir.Value:
    one = sub.CastLike(sub.Constant(value_float=1.0), y)
    factor = sub.Mul(sub.Add(sub.Add(k, k), one), y)
    return sub.Div(sub.Sub(sub.Mul(factor, cur), sub.Mul(k, prev)), sub.Add(k, one))


@dataclasses.dataclass(frozen=True)
class _Family:
    """A polynomial family: its first term and recurrence, and its closed-form edges."""

    first: Callable[[Any], Any]  # p_1(y)
    step: Step
    edges: Callable[[Any, Any, Any, Any], Any]  # (x, y, n, value) -> value
    shifted: bool = False


def _broadcast(x: ir.Value, n: ir.Value) -> tuple[ir.Value, ir.Value]:
    shape = op.Shape(op.Add(x, op.CastLike(n, x)))
    return op.Expand(x, shape), op.Expand(n, shape)


def _recurrence(y: ir.Value, degree: ir.Value, family: _Family) -> ir.Value:
    """p_degree(y) per element, by the family's recurrence."""
    one = const(1.0, y)
    first = family.first(y)
    result = op.Where(op.Equal(degree, const(0, degree)), op.Expand(one, op.Shape(y)), first)
    largest = op.ReduceMax(degree, keepdims=0)
    trips = op.Min(op.Max(op.Sub(largest, op.Constant(value_int=1)), op.Constant(value_int=0)),
                   op.Constant(value_int=_MAX_DEGREE))  # fmt: skip
    start_prev = op.Expand(one, op.Shape(y))

    def body(
        sub: Opset, i: ir.Value, prev: ir.Value, cur: ir.Value, best: ir.Value
    ) -> list[ir.Value]:
        k_int = sub.Add(i, sub.Constant(value_int=1))
        k = sub.CastLike(k_int, y)
        following = family.step(sub, k, y, prev, cur)
        chosen = sub.Where(
            sub.Equal(degree, sub.Add(k_int, sub.Constant(value_int=1))), following, best
        )
        return [sub.Identity(cur), following, chosen]

    return loop(body, trips, [start_prev, first, result])[2]


def _polynomial(family: _Family, name: str) -> Callable[..., Any]:
    def function(x: ir.Value, n: ir.Value) -> ir.Value:
        like = x if isinstance(x, ir.Value) else n
        dtype = compute_dtype(like)
        if isinstance(x, ir.Value):
            xf = cast_to(x, dtype)
        else:
            xf = op.Cast(op.Constant(value_float=float(x)), to=int(dtype))
        degree = cast_to(n, _INT64) if isinstance(n, ir.Value) else op.Constant(value_int=int(n))
        xf, degree = _broadcast(xf, degree)
        y = op.Sub(op.Add(xf, xf), const(1.0, xf)) if family.shifted else xf
        value = _recurrence(y, degree, family)
        value = family.edges(xf, y, degree, value)
        value = op.Where(op.Less(degree, const(0, degree)), const(0.0, xf), value)
        return to_result(value)

    function.__name__ = f"aten_special_{name}"
    function.__doc__ = f"special_{name}(Tensor x, Tensor n) -> Tensor."
    return function


# -- edge cases of each family -----------------------------------------------------------


def _even(n: ir.Value) -> ir.Value:
    return op.Equal(op.Mod(n, op.Constant(value_int=2)), op.Constant(value_int=0))


def _float(n: ir.Value, like: ir.Value) -> ir.Value:
    return op.CastLike(n, like)


def _at_ends(
    x: ir.Value,
    y: ir.Value,
    n: ir.Value,
    at_one: ir.Value,
    at_minus_one_even: ir.Value,
    at_minus_one_odd: ir.Value,
    value: ir.Value,
    shifted: bool,
) -> ir.Value:
    """Values at y = 1 and y = -1 (x = 1 and x = 0 when shifted)."""
    if shifted:
        plus, minus = op.Equal(x, const(1.0, x)), op.Equal(x, const(0.0, x))
    else:
        plus = op.Equal(x, const(1.0, x))
        minus = op.Equal(x, const(-1.0, x))
    at_minus_one = op.Where(_even(n), at_minus_one_even, at_minus_one_odd)
    value = op.Where(minus, at_minus_one, value)
    return op.Where(plus, at_one, value)


def _trig(
    y: ir.Value, n: ir.Value, threshold: int, form: Callable[[Any, Any], Any], value: ir.Value
) -> ir.Value:
    inside = op.And(op.Greater(n, const(threshold, n)), op.Less(op.Abs(y), const(1.0, y)))
    angle = op.Acos(op.Clip(y, const(-1.0, y), const(1.0, y)))
    return op.Where(inside, form(angle, _float(n, y)), value)


def _chebyshev_edges(kind: str, shifted: bool) -> Callable[[Any, Any, Any, Any], Any]:
    thresholds = (
        {"t": 6, "u": 8, "v": 8, "w": 8} if not shifted else {"t": 6, "u": 6, "v": 6, "w": 4}
    )

    def forms(angle: ir.Value, nf: ir.Value) -> ir.Value:
        half = const(0.5, nf)
        one = const(1.0, nf)
        if kind == "t":
            return op.Cos(op.Mul(nf, angle))
        if kind == "u":
            return op.Div(op.Sin(op.Mul(op.Add(nf, one), angle)), op.Sin(angle))
        if kind == "v":
            return op.Div(op.Cos(op.Mul(op.Add(nf, half), angle)), op.Cos(op.Mul(angle, half)))
        return op.Div(op.Sin(op.Mul(op.Add(nf, half), angle)), op.Sin(op.Mul(angle, half)))

    def edges(x: ir.Value, y: ir.Value, n: ir.Value, value: ir.Value) -> ir.Value:
        nf = _float(n, x)
        one = const(1.0, x)
        n1 = op.Add(nf, one)
        n21 = op.Add(op.Add(nf, nf), one)
        value = _trig(y, n, thresholds[kind], forms, value)
        ends = {
            "t": (one, one, op.Neg(one)),
            "u": (n1, n1, op.Neg(n1)),
            "v": (one, n21, op.Neg(n21)),
            "w": (n21, one, op.Neg(one)),
        }[kind]
        return _at_ends(x, y, n, *ends, value, shifted)

    return edges


def _chebyshev(kind: str, shifted: bool) -> _Family:
    def first(y: ir.Value) -> ir.Value:
        if kind == "t":
            return op.Identity(y)
        twice = op.Add(y, y)
        if kind == "u":
            return twice
        return op.Sub(twice, const(1.0, y)) if kind == "v" else op.Add(twice, const(1.0, y))

    return _Family(first, _chebyshev_step, _chebyshev_edges(kind, shifted), shifted)


def _hermite_edges(x: ir.Value, y: ir.Value, n: ir.Value, value: ir.Value) -> ir.Value:
    limit = 512 if x.dtype == ir.DataType.DOUBLE else 128
    return op.Where(op.Greater(n, const(limit, n)), const(float("nan"), x), value)


def _laguerre_edges(x: ir.Value, y: ir.Value, n: ir.Value, value: ir.Value) -> ir.Value:
    return op.Where(op.Equal(x, const(0.0, x)), const(1.0, x), value)


def _legendre_edges(x: ir.Value, y: ir.Value, n: ir.Value, value: ir.Value) -> ir.Value:
    one = const(1.0, x)
    return _at_ends(x, y, n, one, one, op.Neg(one), value, False)


_FAMILIES: dict[str, _Family] = {
    **{f"chebyshev_polynomial_{k}": _chebyshev(k, False) for k in "tuvw"},
    **{f"shifted_chebyshev_polynomial_{k}": _chebyshev(k, True) for k in "tuvw"},
    "hermite_polynomial_h": _Family(lambda y: op.Add(y, y), _hermite_step, _hermite_edges),
    "hermite_polynomial_he": _Family(op.Identity, _hermite_e_step, _hermite_edges),
    "laguerre_polynomial_l": _Family(
        lambda y: op.Sub(const(1.0, y), y), _laguerre_step, _laguerre_edges
    ),
    "legendre_polynomial_p": _Family(op.Identity, _legendre_step, _legendre_edges),
}

for _name, _family in _FAMILIES.items():
    _keys = (f"aten::special_{_name}{overload}" for overload in ("", ".x_scalar", ".n_scalar"))
    onnx_op(*_keys)(_polynomial(_family, _name))
