"""Elementwise math torchlib lacks or gets wrong: sign, float and erf families, gcd/lcm.

The gamma family is in ``gamma``; this module also holds the helpers the
special functions share (compute dtype, Horner's rule).

Series and rational approximations follow the algorithms ATen uses (Cephes, Faddeeva,
Stirling), evaluated with ONNX ops on every element at once: branches become ``Where``.
Integer and half-precision inputs are computed in float32 and cast to the dtype torch
gives the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    cast_to,
    const,
    fx_output_dtypes,
    is_float,
    known_dtype,
    op,
    output_dtype,
)
from onnx_export.ops._opset import Opset
from onnx_export.ops._registration import onnx_op

__all__ = [
    "aten_log_sigmoid",
    "aten_nan_to_num",
    "horner",
    "compute_dtype",
    "to_compute",
    "to_result",
    "float_unary",
    "is_negative",
    "aten_copysign",
    "aten_hypot",
    "aten_ldexp",
    "aten_frexp",
    "aten_logit",
    "aten_special_entr",
    "aten_erfinv",
    "aten_special_ndtri",
    "aten_special_erfcx",
    "aten_special_log_ndtr",
    "aten_trunc",
    "aten_isnan",
    "aten_isinf",
    "aten_isfinite",
    "aten_floor",
    "aten_ceil",
    "aten_round",
    "aten_fmax",
    "aten_fmin",
    "aten_min_other",
    "aten_max_other",
    "aten_gcd",
    "aten_pow_tensor_tensor",
    "aten_lcm",
    "aten_nextafter",
]

_INF = float("inf")
_NAN = float("nan")


def compute_dtype(x: ir.Value) -> ir.DataType:
    """Float64 for float64 inputs, else float32 (half precision and integers included)."""
    return ir.DataType.DOUBLE if x.dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT


def to_compute(x: ir.Value) -> ir.Value:
    """``x`` in the dtype the approximations run in."""
    return cast_to(x, compute_dtype(x)) if isinstance(x, ir.Value) else x


def to_result(y: ir.Value, index: int = 0) -> ir.Value:
    """``y`` cast to the dtype torch gives the node's ``index``-th output."""
    dtypes = fx_output_dtypes()
    return cast_to(y, dtypes[index] if index < len(dtypes) else None)


def horner(x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
    """The polynomial with ``coefficients`` (highest degree first) at ``x``."""
    result = const(coefficients[0], x)
    for c in coefficients[1:]:
        result = op.Add(op.Mul(result, x), const(c, x))
    return result


def float_unary(function: Callable[[ir.Value], ir.Value]) -> Callable[[ir.Value], ir.Value]:
    """``function`` applied in the compute dtype, the result cast back (floats only)."""

    def wrapped(self: ir.Value) -> ir.Value:
        return to_result(function(to_compute(self)))

    wrapped.__name__ = function.__name__
    wrapped.__doc__ = function.__doc__
    return wrapped


# -- sign, min/max, float decomposition --------------------------------------------------


def is_negative(x: ir.Value) -> ir.Value:
    """Whether x < 0, including -0.0 (whose reciprocal is -inf)."""
    zero = const(0.0, x)
    return op.Or(op.Less(x, zero), op.Less(op.Div(const(1.0, x), x), zero))


@onnx_op("aten::copysign.Tensor", "aten::copysign.Scalar")
def aten_copysign(self: ir.Value, other: ir.Value | float) -> ir.Value:
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor."""
    magnitude = op.Abs(to_compute(self))
    sign_of = op.CastLike(other, magnitude)
    result = op.Where(is_negative(sign_of), op.Neg(magnitude), magnitude)
    return to_result(result)


def _nan_aware(extremum: str) -> Callable[..., Any]:
    def function(self: ir.Value, other: ir.Value) -> ir.Value:
        both: ir.Value = getattr(op, extremum)(self, other)
        if not is_float(self):
            return both
        return op.Where(op.IsNaN(self), other, op.Where(op.IsNaN(other), self, both))

    function.__name__ = f"aten_f{extremum.lower()}"
    function.__doc__ = f"f{extremum.lower()}(Tensor self, Tensor other): ignores NaN."
    return function


@onnx_op("aten::hypot")
def aten_hypot(self: ir.Value, other: ir.Value) -> ir.Value:
    """hypot(Tensor self, Tensor other) -> Tensor."""
    return op.Sqrt(op.Add(op.Mul(self, self), op.Mul(other, other)))


@onnx_op("aten::ldexp.Tensor")
def aten_ldexp(self: ir.Value, other: ir.Value) -> ir.Value:
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor: self * 2**other."""
    x = to_compute(self)
    return to_result(op.Mul(x, op.Pow(const(2.0, x), op.CastLike(other, x))))


@onnx_op("aten::frexp.Tensor")
def aten_frexp(self: ir.Value) -> tuple[ir.Value, ir.Value]:
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent): |mantissa| in [0.5, 1)."""
    x = to_compute(self)
    magnitude = op.Abs(x)
    finite_nonzero = op.And(op.Not(op.IsInf(x)), op.Greater(magnitude, const(0.0, x)))
    safe = op.Where(finite_nonzero, magnitude, const(1.0, x))
    exponent = op.Add(op.Floor(op.Div(op.Log(safe), const(math.log(2.0), x))), const(1.0, x))
    mantissa = op.Div(safe, op.Pow(const(2.0, x), exponent))
    # Log's rounding can leave the mantissa just outside [0.5, 1): correct by one.
    high = op.GreaterOrEqual(mantissa, const(1.0, x))
    low = op.Less(mantissa, const(0.5, x))
    exponent = op.Add(exponent, op.Sub(op.CastLike(high, x), op.CastLike(low, x)))
    mantissa = op.Div(safe, op.Pow(const(2.0, x), exponent))
    mantissa = op.Where(op.Less(x, const(0.0, x)), op.Neg(mantissa), mantissa)
    mantissa = op.Where(finite_nonzero, mantissa, x)
    exponent = op.Where(finite_nonzero, exponent, const(0.0, x))
    return to_result(mantissa, 0), op.Cast(exponent, to=int(ir.DataType.INT32))


@onnx_op("aten::logit")
def aten_logit(self: ir.Value, eps: float | None = None) -> ir.Value:
    """logit(Tensor self, float? eps=None) -> Tensor: log(p / (1 - p))."""
    p = to_compute(self)
    if eps is not None:
        p = op.Clip(p, const(eps, p), const(1.0 - eps, p))
    return to_result(op.Log(op.Div(p, op.Sub(const(1.0, p), p))))


@onnx_op("aten::special_entr")
@float_unary
def aten_special_entr(x: ir.Value) -> ir.Value:
    """special_entr(Tensor self): -x log x, 0 at 0, -inf below 0, NaN kept."""
    positive = op.Greater(x, const(0.0, x))
    safe = op.Where(positive, x, const(1.0, x))
    value = op.Neg(op.Mul(x, op.Log(safe)))
    value = op.Where(op.Equal(x, const(0.0, x)), const(0.0, x), value)
    value = op.Where(op.Less(x, const(0.0, x)), const(-_INF, x), value)
    return op.Where(op.IsNaN(x), x, value)


# -- gamma family ------------------------------------------------------------------------


# -- error-function family ---------------------------------------------------------------


@onnx_op("aten::erfinv")
@float_unary
def aten_erfinv(y: ir.Value) -> ir.Value:
    """erfinv(Tensor self): rational start, then two Newton steps (as ATen)."""
    y_abs = op.Abs(y)
    z = op.Mul(y, y)
    central = op.Div(
        op.Mul(y, horner(z, [-0.140543331, 0.914624893, -1.645349621, 0.886226899])),
        horner(z, [0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0]),
    )
    w = op.Sqrt(op.Neg(op.Log(op.Div(op.Sub(const(1.0, y), y_abs), const(2.0, y)))))
    num = horner(w, [1.641345311, 3.429567803, -1.624906493, -1.970840454])
    tail = op.Div(num, horner(w, [1.6370678, 3.5438892, 1.0]))
    tail = op.Where(op.Less(y, const(0.0, y)), op.Neg(tail), tail)
    x = op.Where(op.LessOrEqual(y_abs, const(0.7, y)), central, tail)
    two_over_sqrt_pi = const(2.0 / math.sqrt(math.pi), y)
    for _ in range(2):
        slope = op.Mul(two_over_sqrt_pi, op.Exp(op.Neg(op.Mul(x, x))))
        x = op.Sub(x, op.Div(op.Sub(op.Erf(x), y), slope))
    inf = op.Where(op.Less(y, const(0.0, y)), const(-_INF, y), const(_INF, y))
    x = op.Where(op.Equal(y_abs, const(1.0, y)), inf, x)
    return op.Where(op.Greater(y_abs, const(1.0, y)), const(_NAN, y), x)


_NDTRI_P0 = [
    -5.99633501014107895267e1,
    9.80010754185999661536e1,
    -5.66762857469070293439e1,
    1.39312609387279679503e1,
    -1.23916583867381258016e0,
]
_NDTRI_Q0 = [
    1.0,
    1.95448858338141759834e0,
    4.67627912898881538453e0,
    8.63602421390890590575e1,
    -2.25462687854119370527e2,
    2.00260212380060660359e2,
    -8.20372256168333339912e1,
    1.59056225126211695515e1,
    -1.18331621121330003142e0,
]
_NDTRI_P1 = [
    4.05544892305962419923e0,
    3.15251094599893866154e1,
    5.71628192246421288162e1,
    4.40805073893200834700e1,
    1.46849561928858024014e1,
    2.18663306850790267539e0,
    -1.40256079171354495875e-1,
    -3.50424626827848203418e-2,
    -8.57456785154685413611e-4,
]
_NDTRI_Q1 = [
    1.0,
    1.57799883256466749731e1,
    4.53907635128879210584e1,
    4.13172038254672030440e1,
    1.50425385692907503408e1,
    2.50464946208309415979e0,
    -1.42182922854787788574e-1,
    -3.80806407691578277194e-2,
    -9.33259480895457427372e-4,
]
_NDTRI_P2 = [
    3.23774891776946035970e0,
    6.91522889068984211695e0,
    3.93881025292474443415e0,
    1.33303460815807542389e0,
    2.01485389549179081538e-1,
    1.23716634817820021358e-2,
    3.01581553508235416007e-4,
    2.65806974686737550832e-6,
    6.23974539184983293730e-9,
]
_NDTRI_Q2 = [
    1.0,
    6.02427039364742014255e0,
    3.67983563856160859403e0,
    1.37702099489081330271e0,
    2.16236993594496635890e-1,
    1.34204006088543189037e-2,
    3.28014464682127739104e-4,
    2.89247864745380683936e-6,
    6.79019408009981274425e-9,
]
_EXP_MINUS_2 = 0.13533528323661269189


@onnx_op("aten::special_ndtri")
@float_unary
def aten_special_ndtri(p: ir.Value) -> ir.Value:
    """special_ndtri(Tensor self): the inverse of the normal CDF (Cephes' three ranges)."""
    one = const(1.0, p)
    upper = op.Greater(p, const(1.0 - _EXP_MINUS_2, p))
    y = op.Where(upper, op.Sub(one, p), p)
    centre = op.Sub(p, const(0.5, p))
    c2 = op.Mul(centre, centre)
    ratio = op.Div(horner(c2, _NDTRI_P0), horner(c2, _NDTRI_Q0))
    central = op.Mul(
        op.Add(centre, op.Mul(centre, op.Mul(c2, ratio))), const(2.50662827463100050242, p)
    )
    safe = op.Min(
        op.Max(y, const(1e-300 if p.dtype == ir.DataType.DOUBLE else 1e-38, p)),
        const(_EXP_MINUS_2, p),
    )
    x = op.Sqrt(op.Mul(const(-2.0, p), op.Log(safe)))
    x0 = op.Sub(x, op.Div(op.Log(x), x))
    z = op.Reciprocal(x)
    near = op.Div(op.Mul(z, horner(z, _NDTRI_P1)), horner(z, _NDTRI_Q1))
    far = op.Div(op.Mul(z, horner(z, _NDTRI_P2)), horner(z, _NDTRI_Q2))
    tail = op.Sub(x0, op.Where(op.Less(x, const(8.0, p)), near, far))
    tail = op.Where(upper, tail, op.Neg(tail))
    result = op.Where(op.Greater(y, const(_EXP_MINUS_2, p)), central, tail)
    result = op.Where(op.Equal(p, const(0.0, p)), const(-_INF, p), result)
    result = op.Where(op.Equal(p, one), const(_INF, p), result)
    outside = op.Or(op.Less(p, const(0.0, p)), op.Greater(p, one))
    return op.Where(outside, const(_NAN, p), result)


def _erfcx_nonnegative(x: ir.Value) -> ir.Value:
    """exp(x^2) erfc(x) for x >= 0: a continued fraction from 1 on, erf below."""
    large = op.Max(x, const(1.0, x))
    tail = const(0.0, x)
    for k in range(20, 0, -1):
        tail = op.Div(const(k / 2.0, x), op.Add(large, tail))
    fraction = op.Div(const(1.0 / math.sqrt(math.pi), x), op.Add(large, tail))
    small = op.Min(x, const(1.0, x))
    direct = op.Mul(op.Exp(op.Mul(small, small)), op.Sub(const(1.0, x), op.Erf(small)))
    return op.Where(op.Less(x, const(1.0, x)), direct, fraction)


def _erfcx(x: ir.Value) -> ir.Value:
    positive = _erfcx_nonnegative(op.Abs(x))
    negative = op.Sub(op.Mul(const(2.0, x), op.Exp(op.Mul(x, x))), positive)
    result = op.Where(op.Less(x, const(0.0, x)), negative, positive)
    return op.Where(op.IsNaN(x), x, result)


@onnx_op("aten::special_erfcx")
@float_unary
def aten_special_erfcx(x: ir.Value) -> ir.Value:
    """special_erfcx(Tensor self): exp(x^2) erfc(x) without overflow."""
    return _erfcx(x)


@onnx_op("aten::special_log_ndtr")
@float_unary
def aten_special_log_ndtr(x: ir.Value) -> ir.Value:
    """special_log_ndtr(Tensor self): log of the normal CDF, stable in the lower tail."""
    t = op.Mul(x, const(1.0 / math.sqrt(2.0), x))
    lower = op.Sub(op.Log(op.Div(_erfcx(op.Neg(t)), const(2.0, x))), op.Mul(t, t))
    upper = op.Log(op.Div(op.Add(const(1.0, x), op.Erf(t)), const(2.0, x)))
    return op.Where(op.Less(x, const(-1.0, x)), lower, upper)


# -- float-only ONNX ops on integers and bools -------------------------------------------


def _rounding(name: str) -> Callable[..., Any]:
    """floor/ceil/round/trunc: the identity on integers (ONNX's take floats only)."""

    def rounding(self: ir.Value) -> ir.Value:
        if self.dtype is not None and not is_float(self):
            return op.Identity(self)
        rounded: ir.Value = getattr(op, name)(self)
        return rounded

    rounding.__name__ = f"aten_{name.lower()}"
    return rounding


@onnx_op("aten::trunc")
def aten_trunc(self: ir.Value) -> ir.Value:
    """trunc(Tensor self) -> Tensor: toward zero; the identity on integers."""
    if self.dtype is not None and not is_float(self):
        return op.Identity(self)
    return op.Mul(op.Floor(op.Abs(self)), op.Sign(self))


def _all_false(self: ir.Value) -> ir.Value:
    return op.Expand(op.Constant(value=ir.tensor(False)), op.Shape(self))


def _float32_for_isinf(self: ir.Value) -> ir.Value:
    """IsInf takes float and double only at opset 18: float16/bfloat16 go through float."""
    if self.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return op.Cast(self, to=int(ir.DataType.FLOAT))
    return self


@onnx_op("aten::isnan")
def aten_isnan(self: ir.Value) -> ir.Value:
    """isnan(Tensor self) -> Tensor: all false for integers and bools."""
    return op.IsNaN(self) if is_float(self) else _all_false(self)


@onnx_op("aten::isinf")
def aten_isinf(self: ir.Value) -> ir.Value:
    """isinf(Tensor self) -> Tensor: all false for integers and bools."""
    return op.IsInf(_float32_for_isinf(self)) if is_float(self) else _all_false(self)


@onnx_op("aten::isfinite")
def aten_isfinite(self: ir.Value) -> ir.Value:
    """isfinite(Tensor self) -> Tensor: all true for integers and bools."""
    if not is_float(self):
        return op.Not(_all_false(self))
    wide = _float32_for_isinf(self)
    return op.Not(op.Or(op.IsInf(wide), op.IsNaN(wide)))


aten_floor = onnx_op("aten::floor")(_rounding("Floor"))
aten_ceil = onnx_op("aten::ceil")(_rounding("Ceil"))
aten_round = onnx_op("aten::round")(_rounding("Round"))
aten_fmax = onnx_op("aten::fmax")(_nan_aware("Max"))
aten_fmin = onnx_op("aten::fmin")(_nan_aware("Min"))


def _nan_propagating(extremum: str) -> Callable[..., Any]:
    def function(self: ir.Value, other: ir.Value) -> ir.Value:
        dtype = output_dtype(0)
        self, other = cast_to(self, dtype), cast_to(other, dtype)
        if self.dtype == ir.DataType.BOOL:
            return op.And(self, other) if extremum == "Min" else op.Or(self, other)
        both: ir.Value = getattr(op, extremum)(self, other)
        if not is_float(self):
            return both
        return op.Where(op.IsNaN(self), self, op.Where(op.IsNaN(other), other, both))

    function.__name__ = f"aten_{extremum.lower()}_other"
    function.__doc__ = (
        f"{extremum.lower()}.other(Tensor self, Tensor other): elementwise, NaN propagates "
        "(as minimum/maximum; registered so that a graph with it needs no decomposition)."
    )
    return function


aten_min_other = onnx_op("aten::min.other")(_nan_propagating("Min"))
aten_max_other = onnx_op("aten::max.other")(_nan_propagating("Max"))


# -- integer number theory ---------------------------------------------------------------

_EUCLID_STEPS = 93  # enough for any pair of int64 values (Fibonacci worst case)


def _gcd(a: ir.Value, b: ir.Value) -> ir.Value:
    from onnx_export.ops._common import loop

    zero = const(0, a)

    def body(sub: Opset, i: ir.Value, x: ir.Value, y: ir.Value) -> list[ir.Value]:
        nonzero = sub.Not(sub.Equal(y, zero))
        safe = sub.Where(nonzero, y, sub.CastLike(sub.Constant(value_int=1), y))
        return [sub.Where(nonzero, y, x), sub.Where(nonzero, sub.Mod(x, safe), y)]

    trips = op.Constant(value_int=_EUCLID_STEPS)
    return loop(body, trips, [op.Abs(a), op.Abs(b)])[0]


@onnx_op("aten::gcd")
def aten_gcd(self: ir.Value, other: ir.Value) -> ir.Value:
    """gcd(Tensor self, Tensor other) -> Tensor (non-negative, Euclid's algorithm)."""
    a, b = op.Add(self, op.Mul(other, const(0, other))), op.Add(other, op.Mul(self, const(0, self)))
    return _gcd(a, b)


@onnx_op("aten::lcm")
def aten_lcm(self: ir.Value, other: ir.Value) -> ir.Value:
    """lcm(Tensor self, Tensor other) -> Tensor: |a / gcd(a, b) * b|, 0 when gcd is 0."""
    a, b = op.Add(self, op.Mul(other, const(0, other))), op.Add(other, op.Mul(self, const(0, self)))
    divisor = _gcd(a, b)
    zero = const(0, a)
    safe = op.Where(op.Equal(divisor, zero), const(1, a), divisor)
    return op.Where(op.Equal(divisor, zero), zero, op.Abs(op.Mul(op.Div(a, safe), b)))


_POWER_BITS = 64  # square-and-multiply steps: every bit of an int64 exponent
_INTEGERS = {
    ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8,
}  # fmt: skip


@onnx_op("aten::pow.Tensor_Tensor")
def aten_pow_tensor_tensor(self: ir.Value, exponent: ir.Value) -> ir.Value:
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor; integers exactly.

    ONNX Runtime's integer ``Pow`` goes through floating point: ``1000000007 ** 2`` came
    out 49 off and ``** 3`` did not wrap as torch's int64 does (BLT's rolling hash of
    byte groups, ``prime ** arange(n)``, then hashed other embeddings: max |d| 5 with no
    error). Integers are raised by squaring and multiplying, in the integer dtype, over
    every bit of the exponent; other dtypes keep ``Pow``.
    """
    if self.dtype not in _INTEGERS or exponent.dtype not in _INTEGERS:
        return op.Pow(self, exponent)
    power = op.CastLike(exponent, self)
    base = op.Add(self, op.Mul(power, const(0, self)))  # broadcast to the result's shape
    one, two = const(1, self), const(2, self)

    def body(sub: Opset, i: ir.Value, result: ir.Value, b: ir.Value, e: ir.Value) -> list[ir.Value]:
        odd = sub.Equal(sub.Mod(e, two), one)
        return [sub.Where(odd, sub.Mul(result, b), result), sub.Mul(b, b), sub.Div(e, two)]

    from onnx_export.ops._common import loop

    start = op.Add(op.Mul(base, const(0, self)), one)
    result = loop(body, op.Constant(value_int=_POWER_BITS), [start, base, op.Abs(power)])[0]
    # A negative exponent: torch gives 0, except for bases 1 and -1 (then |e| decides).
    unit = op.Or(op.Equal(base, one), op.Equal(base, op.Neg(one)))
    zero_out = op.And(op.Less(power, const(0, self)), op.Not(unit))
    return op.Where(zero_out, const(0, self), result)


# -- regularised incomplete gamma --------------------------------------------------------


# -- nextafter without bit casts ---------------------------------------------------------

#: (significand bits, smallest subnormal, largest finite) per float dtype.
_FLOAT_LAYOUT = {
    ir.DataType.FLOAT: (24, 2.0**-149, 3.4028234663852886e38),
    ir.DataType.DOUBLE: (53, 2.0**-1074, 1.7976931348623157e308),
    ir.DataType.FLOAT16: (11, 2.0**-24, 65504.0),
}


@onnx_op("aten::nextafter")
def aten_nextafter(self: ir.Value, other: ir.Value) -> ir.Value:
    """nextafter(Tensor self, Tensor other): the next representable float towards other.

    ONNX opset 18 has no bit casts, so the spacing is computed from the exponent: above
    |x| it is 2^(e - p) (p significand bits, x = m 2^e with |m| in [0.5, 1)), below a power
    of two it halves, and it is never below the smallest subnormal.
    """
    x, y = self, op.CastLike(other, self)
    bits, smallest, largest = _FLOAT_LAYOUT.get(
        x.dtype or ir.DataType.FLOAT, _FLOAT_LAYOUT[ir.DataType.FLOAT]
    )
    magnitude = op.Abs(x)
    nonzero = op.Greater(magnitude, const(0.0, x))
    safe = op.Where(op.And(nonzero, op.Not(op.IsInf(x))), magnitude, const(1.0, x))
    exponent = op.Add(op.Floor(op.Div(op.Log(safe), const(math.log(2.0), x))), const(1.0, x))
    mantissa = op.Div(safe, op.Pow(const(2.0, x), exponent))
    exponent = op.Add(exponent, op.CastLike(op.GreaterOrEqual(mantissa, const(1.0, x)), x))
    exponent = op.Sub(exponent, op.CastLike(op.Less(mantissa, const(0.5, x)), x))
    up = op.Pow(const(2.0, x), op.Sub(exponent, const(float(bits), x)))
    power_of_two = op.Equal(safe, op.Pow(const(2.0, x), op.Sub(exponent, const(1.0, x))))
    down = op.Where(power_of_two, op.Div(up, const(2.0, x)), up)
    direction = op.Sign(op.Sub(y, x))
    away = op.Greater(op.Mul(direction, x), const(0.0, x))
    step = op.Max(op.Where(away, up, down), const(smallest, x))
    result = op.Add(x, op.Mul(direction, step))
    result = op.Where(nonzero, result, op.Mul(direction, const(smallest, x)))
    result = op.Where(op.IsInf(x), op.Mul(op.Sign(x), const(largest, x)), result)
    result = op.Where(op.Equal(x, y), y, result)
    return op.Where(op.Or(op.IsNaN(x), op.IsNaN(y)), op.Add(x, y), result)


@onnx_op("aten::log_sigmoid")
def aten_log_sigmoid(self: ir.Value) -> ir.Value:
    """log_sigmoid(Tensor self): ``-softplus(-x)``, exact where ``log(sigmoid(x))`` underflows.

    torchlib's ``Log(Sigmoid(x))`` gives ``-inf`` from about ``x = -88`` in float32 (the
    sigmoid is 0); torch gives ``x`` there (``log_sigmoid(-200) = -200``).
    """
    half = self.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
    x = op.Cast(self, to=int(ir.DataType.FLOAT)) if half else self  # Softplus: float kernels
    result = op.Neg(op.Softplus(op.Neg(x)))
    return op.CastLike(result, self) if half else result


@onnx_op("aten::nan_to_num")
def aten_nan_to_num(
    self: ir.Value,
    nan: float | None = None,
    posinf: float | None = None,
    neginf: float | None = None,
) -> ir.Value:
    """nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None).

    NaN becomes ``nan`` (0), +inf ``posinf`` and -inf ``neginf`` (the dtype's largest and
    lowest finite values); integers and bools are returned as they are. Half precision is
    compared in float32 (ONNX's ``IsInf`` takes no float16) and the result keeps its dtype.
    """
    if not is_float(self):
        return op.Identity(self)
    dtype = known_dtype(self)
    info = np.finfo(dtype.numpy()) if dtype != ir.DataType.BFLOAT16 else None
    high = float(info.max) if info is not None else 3.3895313892515355e38
    wide = to_compute(self)
    result = op.Where(op.IsNaN(wide), const(0.0 if nan is None else nan, wide), wide)
    result = op.Where(
        op.IsInf(wide, detect_negative=0), const(high if posinf is None else posinf, wide), result
    )
    result = op.Where(
        op.IsInf(wide, detect_positive=0), const(-high if neginf is None else neginf, wide), result
    )
    return cast_to(result, dtype)
