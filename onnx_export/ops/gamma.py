"""The gamma family: log-gamma, digamma, polygamma, Hurwitz zeta, incomplete gammas.

Stirling and asymptotic series after a shift by the recurrence, reflection for small or
negative arguments (as ATen's Cephes-derived code), Euler-Maclaurin for ``zeta``, and
the series or Lentz's continued fraction (float64) for the incomplete gammas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import (
    const,
    loop,
    op,
    unsupported,
)
from onnx_export.ops._opset import Opset
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.math import (
    compute_dtype,
    float_unary,
    horner,
    is_negative,
    to_compute,
    to_result,
)

__all__ = [
    "lgamma",
    "aten_lgamma",
    "aten_digamma",
    "aten_special_zeta",
    "aten_polygamma",
    "aten_igamma",
    "aten_igammac",
]

_INF = float("inf")
_NAN = float("nan")

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _lgamma_large(z: ir.Value) -> ir.Value:
    """Stirling's series for log Gamma(z), z >= 8."""
    inv = op.Reciprocal(z)
    inv2 = op.Mul(inv, inv)
    series = op.Mul(inv, horner(inv2, [1 / 1188, -1 / 1680, 1 / 1260, -1 / 360, 1 / 12]))
    main = op.Sub(op.Mul(op.Sub(z, const(0.5, z)), op.Log(z)), z)
    return op.Add(op.Add(main, const(_HALF_LOG_2PI, z)), series)


def _lgamma_positive(y: ir.Value) -> ir.Value:
    """The log of Gamma(y) for y >= 0.5: small arguments shifted up by 8 (recurrence)."""
    small = op.Less(y, const(10.0, y))
    shifted = op.Where(small, y, const(10.0, y))  # keeps the product finite when unused
    product = shifted
    for k in range(1, 8):
        product = op.Mul(product, op.Add(shifted, const(float(k), y)))
    from_shift = op.Sub(_lgamma_large(op.Add(shifted, const(8.0, y))), op.Log(product))
    return op.Where(small, from_shift, _lgamma_large(op.Max(y, const(8.0, y))))


def _sin_pi_abs(x: ir.Value) -> ir.Value:
    """|sin(pi x)|, accurate for large |x| (reduced to the nearest integer first)."""
    r = op.Sub(x, op.Round(x))
    return op.Abs(op.Sin(op.Mul(r, const(math.pi, x))))


@onnx_op("aten::lgamma")
@float_unary
def aten_lgamma(x: ir.Value) -> ir.Value:
    """lgamma(Tensor self): log|Gamma(x)|, reflection below 0.5."""
    return lgamma(x)


def lgamma(x: ir.Value) -> ir.Value:
    """log|Gamma(x)| in ``x``'s (float) dtype."""
    reflect = op.Less(x, const(0.5, x))
    y = op.Where(reflect, op.Sub(const(1.0, x), x), x)
    positive = _lgamma_positive(y)
    reflected = op.Sub(op.Log(op.Div(const(math.pi, x), _sin_pi_abs(x))), positive)
    result = op.Where(reflect, reflected, positive)
    return op.Where(op.IsInf(x), const(_INF, x), result)


_DIGAMMA_ASYMPTOTIC = [
    8.33333333333333333333e-2,
    -2.10927960927960927961e-2,
    7.57575757575757575758e-3,
    -4.16666666666666666667e-3,
    3.96825396825396825397e-3,
    -8.33333333333333333333e-3,
    8.33333333333333333333e-2,
]


def _digamma_positive(y: ir.Value) -> ir.Value:
    """psi(y) for y > 0: shift by 10, then the asymptotic series."""
    total = op.Reciprocal(y)
    for k in range(1, 10):
        total = op.Add(total, op.Reciprocal(op.Add(y, const(float(k), y))))
    z = op.Add(y, const(10.0, y))
    inv2 = op.Reciprocal(op.Mul(z, z))
    series = op.Mul(inv2, horner(inv2, _DIGAMMA_ASYMPTOTIC))
    value = op.Sub(op.Sub(op.Log(z), op.Div(const(0.5, y), z)), series)
    return op.Sub(value, total)


@onnx_op("aten::digamma", "aten::special_psi")
@float_unary
def aten_digamma(x: ir.Value) -> ir.Value:
    """digamma(Tensor self): psi(x); reflection below 0; NaN at negative integers."""
    zero = const(0.0, x)
    negative = op.Less(x, zero)
    y = op.Where(negative, op.Sub(const(1.0, x), x), x)
    y = op.Where(op.Equal(y, zero), const(1.0, x), y)
    value = _digamma_positive(y)
    fraction = op.Sub(x, op.Where(negative, op.Ceil(x), op.Floor(x)))  # modf's part
    reflected = op.Sub(
        value, op.Div(const(math.pi, x), op.Tan(op.Mul(fraction, const(math.pi, x))))
    )
    value = op.Where(negative, reflected, value)
    value = op.Where(op.And(negative, op.Equal(x, op.Floor(x))), const(_NAN, x), value)
    at_zero = op.Where(is_negative(x), const(_INF, x), const(-_INF, x))
    value = op.Where(op.Equal(x, zero), at_zero, value)
    return op.Where(op.Equal(x, const(_INF, x)), x, value)


def _trigamma(x: ir.Value) -> ir.Value:
    reflect = op.Less(x, const(0.5, x))
    y = op.Where(reflect, op.Sub(const(1.0, x), x), x)
    total = const(0.0, x)
    for _ in range(6):
        total = op.Add(total, op.Reciprocal(op.Mul(y, y)))
        y = op.Add(y, const(1.0, x))
    ixx = op.Reciprocal(op.Mul(y, y))
    tail = horner(ixx, [1 / 42, -1 / 30, 1 / 6])  # 1/6 - ixx (1/30 - ixx/42)
    tail = op.Add(op.Add(const(1.0, x), op.Div(const(0.5, x), y)), op.Mul(ixx, tail))
    total = op.Add(total, op.Div(tail, y))
    sin_pi = op.Sin(op.Mul(op.Sub(x, op.Round(x)), const(math.pi, x)))
    reflection = op.Div(const(math.pi * math.pi, x), op.Mul(sin_pi, sin_pi))
    return op.Where(reflect, op.Sub(reflection, total), total)


_ZETA_EULER_MACLAURIN = [
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
]


def _zeta(x: ir.Value, q: ir.Value) -> ir.Value:
    """Hurwitz zeta(x, q): 12 terms summed, then the Euler-Maclaurin tail (Cephes)."""
    neg_x = op.Neg(x)
    total = const(0.0, x)
    a = q
    for _ in range(12):
        total = op.Add(total, op.Pow(a, neg_x))
        a = op.Add(a, const(1.0, x))
    b = op.Pow(a, neg_x)
    total = op.Add(total, op.Div(op.Mul(b, a), op.Sub(x, const(1.0, x))))
    total = op.Add(total, op.Mul(const(0.5, x), b))  # b is the first term not summed
    rising = const(1.0, x)
    k = 0.0
    for divisor in _ZETA_EULER_MACLAURIN:
        rising = op.Mul(rising, op.Add(x, const(k, x)))
        b = op.Div(b, a)
        total = op.Add(total, op.Div(op.Mul(rising, b), const(divisor, x)))
        rising = op.Mul(rising, op.Add(x, const(k + 1.0, x)))
        b = op.Div(b, a)
        k += 2.0
    one = const(1.0, x)
    zero = const(0.0, x)
    q_nonpositive = op.LessOrEqual(q, zero)
    total = op.Where(op.And(q_nonpositive, op.Not(op.Equal(x, op.Floor(x)))), const(_NAN, x), total)
    total = op.Where(op.And(q_nonpositive, op.Equal(q, op.Floor(q))), const(_INF, x), total)
    total = op.Where(op.Less(x, one), const(_NAN, x), total)
    return op.Where(op.Equal(x, one), const(_INF, x), total)


@onnx_op("aten::special_zeta")
def aten_special_zeta(self: ir.Value | float, other: ir.Value | float) -> ir.Value:
    """special_zeta(Tensor self, Tensor other): Hurwitz zeta(self, other)."""
    like = self if isinstance(self, ir.Value) else other
    if not isinstance(like, ir.Value):
        raise unsupported("a tensor for self or other", "two Python numbers")
    x = op.Cast(self, to=int(compute_dtype(like))) if isinstance(self, ir.Value) else self
    q = op.Cast(other, to=int(compute_dtype(like))) if isinstance(other, ir.Value) else other
    x = x if isinstance(x, ir.Value) else op.CastLike(x, q)
    q = q if isinstance(q, ir.Value) else op.CastLike(q, x)
    return to_result(_zeta(x, q))


@onnx_op("aten::polygamma")
def aten_polygamma(n: int, self: ir.Value) -> ir.Value:
    """polygamma(int n, Tensor self): the n-th derivative of digamma."""
    x = to_compute(self)
    if n == 0:
        return aten_digamma(self)
    if n == 1:
        return to_result(_trigamma(x))
    factor = (1.0 if n % 2 else -1.0) * math.factorial(n)
    return to_result(op.Mul(const(factor, x), _zeta(const(float(n + 1), x), x)))


_GAMMA_STEPS = 300

_TINY = 1e-300


def _incomplete_gamma(a: ir.Value, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(P(a, x), Q(a, x)), the regularised incomplete gammas, in float64.

    The series below x = a + 1, Lentz's continued fraction above, each a fixed number of
    steps (converged for every argument float32 can hold).
    """
    one = const(1.0, x)
    positive = op.And(op.Greater(a, const(0.0, a)), op.Greater(x, const(0.0, x)))
    finite = op.And(op.Not(op.IsInf(a)), op.Not(op.IsInf(x)))
    usable = op.And(positive, finite)
    a_safe = op.Where(usable, a, one)
    x_safe = op.Where(usable, x, one)
    prefactor = op.Exp(op.Sub(op.Sub(op.Mul(a_safe, op.Log(x_safe)), x_safe), lgamma(a_safe)))

    def series(sub: Opset, i: ir.Value, total: ir.Value, term: ir.Value) -> list[ir.Value]:
        n = sub.Add(sub.CastLike(i, a_safe), sub.CastLike(sub.Constant(value_float=1.0), a_safe))
        following = sub.Div(sub.Mul(term, x_safe), sub.Add(a_safe, n))
        return [sub.Add(total, following), following]

    start = op.Reciprocal(a_safe)
    steps = op.Constant(value_int=_GAMMA_STEPS)
    lower = op.Mul(loop(series, steps, [start, start])[0], prefactor)

    tiny = const(_TINY, x)
    b0 = op.Sub(op.Add(x_safe, one), a_safe)

    def fraction(
        sub: Opset, i: ir.Value, b: ir.Value, c: ir.Value, d: ir.Value, h: ir.Value
    ) -> list[ir.Value]:
        k = sub.Add(sub.CastLike(i, a_safe), sub.CastLike(sub.Constant(value_float=1.0), a_safe))
        an = sub.Neg(sub.Mul(k, sub.Sub(k, a_safe)))
        b_next = sub.Add(b, sub.CastLike(sub.Constant(value_float=2.0), b))
        d_next = sub.Add(sub.Mul(an, d), b_next)
        d_next = sub.Where(sub.Less(sub.Abs(d_next), tiny), tiny, d_next)
        c_next = sub.Add(b_next, sub.Div(an, c))
        c_next = sub.Where(sub.Less(sub.Abs(c_next), tiny), tiny, c_next)
        d_next = sub.Reciprocal(d_next)
        return [b_next, c_next, d_next, sub.Mul(h, sub.Mul(d_next, c_next))]

    safe_b0 = op.Where(op.Less(op.Abs(b0), tiny), tiny, b0)
    d0 = op.Reciprocal(safe_b0)
    c0 = op.Div(one, tiny)
    upper = op.Mul(loop(fraction, steps, [b0, op.Expand(c0, op.Shape(b0)), d0, d0])[3], prefactor)
    use_series = op.Less(x_safe, op.Add(a_safe, one))
    p = op.Where(use_series, lower, op.Sub(one, upper))
    q = op.Where(use_series, op.Sub(one, lower), upper)
    return _gamma_edges(a, x, p, q)


def _gamma_edges(a: ir.Value, x: ir.Value, p: ir.Value, q: ir.Value) -> tuple[ir.Value, ir.Value]:
    zero, one, nan = const(0.0, x), const(1.0, x), const(_NAN, x)
    invalid = op.Or(op.Less(x, zero), op.Less(a, zero))
    a_zero = op.Equal(a, zero)
    x_zero = op.Equal(x, zero)
    x_inf, a_inf = op.IsInf(x), op.IsInf(a)
    # Later rules win, as the order of checks in ATen.
    p = op.Where(x_inf, one, p)
    q = op.Where(x_inf, zero, q)
    p = op.Where(a_inf, op.Where(x_inf, nan, zero), p)
    q = op.Where(a_inf, op.Where(x_inf, nan, one), q)
    p = op.Where(x_zero, zero, p)
    q = op.Where(x_zero, one, q)
    p = op.Where(a_zero, op.Where(op.Greater(x, zero), one, nan), p)
    q = op.Where(a_zero, op.Where(op.Greater(x, zero), zero, nan), q)
    return op.Where(invalid, nan, p), op.Where(invalid, nan, q)


def _gamma_function(upper: bool) -> Callable[..., Any]:
    def function(self: ir.Value, other: ir.Value) -> ir.Value:
        a = op.Cast(self, to=int(ir.DataType.DOUBLE))
        x = op.Cast(other, to=int(ir.DataType.DOUBLE))
        shape = op.Shape(op.Add(a, x))
        p, q = _incomplete_gamma(op.Expand(a, shape), op.Expand(x, shape))
        return to_result(q if upper else p)

    name = "igammac" if upper else "igamma"
    function.__name__ = f"aten_{name}"
    kind = "upper" if upper else "lower"
    function.__doc__ = f"{name}(Tensor self, Tensor other): regularised {kind} incomplete gamma."
    return function


aten_igamma = onnx_op("aten::igamma", "aten::special_gammainc")(_gamma_function(upper=False))
aten_igammac = onnx_op("aten::igammac", "aten::special_gammaincc")(_gamma_function(upper=True))
