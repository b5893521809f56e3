"""Bessel-family functions (``i0``, ``special_*bessel*``, ``special_airy_ai``).

Each follows the Cephes approximation ATen uses: Chebyshev series (Clenshaw's recurrence)
or rational functions on two or three ranges of the argument, chosen per element with
``Where``. The coefficient tables are in ``_bessel_data``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.ops._bessel_data import TABLES
from onnx_export.ops._common import const, op
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.math import float_unary, horner, to_compute, to_result

__all__ = [
    "aten_i0",
    "aten_special_i0e",
    "aten_special_i1",
    "aten_special_i1e",
    "aten_special_bessel_j0",
    "aten_special_bessel_j1",
    "aten_special_bessel_y0",
    "aten_special_bessel_y1",
    "aten_special_spherical_bessel_j0",
    "aten_special_airy_ai",
    "aten_special_modified_bessel_k0",
    "aten_special_modified_bessel_k1",
    "aten_special_scaled_modified_bessel_k0",
    "aten_special_scaled_modified_bessel_k1",
]

_INF = float("inf")
_NAN = float("nan")
_SQRT_2_OVER_PI = 0.797884560802865355879892119868763737


def _clenshaw(x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
    """Cephes' ``chbevl``: the Chebyshev series with ``coefficients`` at ``x``."""
    b0: Any = const(coefficients[0], x)
    b1: Any = const(0.0, x)
    b2: Any = b1
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = op.Add(op.Sub(op.Mul(x, b1), b2), const(c, x))
    return op.Mul(const(0.5, x), op.Sub(b0, b2))


# -- modified Bessel functions of the first kind ------------------------------------------


def _scaled_i(x: ir.Value, order: int) -> ir.Value:
    """exp(-|x|) I_order(|x|) (``order`` 0 or 1, without the sign of x for order 1)."""
    table = TABLES[f"I{order}"]
    a = op.Abs(x)
    near = _clenshaw(op.Sub(op.Div(a, const(2.0, x)), const(2.0, x)), table["A"])
    if order == 1:
        near = op.Mul(near, a)
    safe = op.Max(a, const(8.0, x))
    far = op.Div(
        _clenshaw(op.Sub(op.Div(const(32.0, x), safe), const(2.0, x)), table["B"]),
        op.Sqrt(safe),
    )
    return op.Where(op.LessOrEqual(a, const(8.0, x)), near, far)


def _odd(x: ir.Value, value: ir.Value) -> ir.Value:
    return op.Where(op.Less(x, const(0.0, x)), op.Neg(value), value)


@onnx_op("aten::i0", "aten::special_modified_bessel_i0")
@float_unary
def aten_i0(x: ir.Value) -> ir.Value:
    """i0(Tensor self): the modified Bessel function I0."""
    return op.Mul(op.Exp(op.Abs(x)), _scaled_i(x, 0))


@onnx_op("aten::special_i0e")
@float_unary
def aten_special_i0e(x: ir.Value) -> ir.Value:
    """special_i0e(Tensor self): exp(-|x|) I0(x)."""
    return _scaled_i(x, 0)


@onnx_op("aten::special_i1", "aten::special_modified_bessel_i1")
@float_unary
def aten_special_i1(x: ir.Value) -> ir.Value:
    """special_i1(Tensor self): the modified Bessel function I1."""
    return _odd(x, op.Mul(op.Exp(op.Abs(x)), _scaled_i(x, 1)))


@onnx_op("aten::special_i1e")
@float_unary
def aten_special_i1e(x: ir.Value) -> ir.Value:
    """special_i1e(Tensor self): exp(-|x|) I1(x)."""
    return _odd(x, _scaled_i(x, 1))


# -- modified Bessel functions of the second kind -----------------------------------------


def _k(x: ir.Value, order: int, scaled: bool) -> ir.Value:
    """K_order(x) (times exp(x) when ``scaled``), x > 0; inf at 0, NaN below."""
    table = TABLES[f"K{order}"]
    small = op.Min(x, const(2.0, x))
    series = _clenshaw(op.Sub(op.Mul(small, small), const(2.0, x)), table["A"])
    log_half = op.Log(op.Mul(const(0.5, x), small))
    i_small = op.Mul(op.Exp(small), _scaled_i(small, order))
    if order == 0:
        near = op.Sub(series, op.Mul(log_half, i_small))
    else:
        near = op.Add(op.Mul(log_half, i_small), op.Div(series, small))
    if scaled:
        near = op.Mul(near, op.Exp(small))
    large = op.Max(x, const(2.0, x))
    far = op.Div(
        _clenshaw(op.Sub(op.Div(const(8.0, x), large), const(2.0, x)), table["B"]),
        op.Sqrt(large),
    )
    if not scaled:
        far = op.Mul(far, op.Exp(op.Neg(large)))
    result = op.Where(op.LessOrEqual(x, const(2.0, x)), near, far)
    result = op.Where(op.Equal(x, const(0.0, x)), const(_INF, x), result)
    return op.Where(op.Less(x, const(0.0, x)), const(_NAN, x), result)


def _k_function(order: int, scaled: bool) -> Callable[..., Any]:
    def function(x: ir.Value) -> ir.Value:
        return to_result(_k(to_compute(x), order, scaled))

    prefix = "scaled_" if scaled else ""
    function.__name__ = f"aten_special_{prefix}modified_bessel_k{order}"
    function.__doc__ = f"special_{prefix}modified_bessel_k{order}(Tensor self)."
    return function


# -- Bessel functions of the first and second kind ----------------------------------------


def _asymptotic(x: ir.Value, order: int, phase: float, kind: str) -> ir.Value:
    """The large-argument form (x > 5) shared by J0, J1, Y0 and Y1."""
    table = TABLES[f"ASYMPTOTIC{order}"]
    w = op.Div(const(25.0, x), op.Mul(x, x))
    p = op.Div(horner(w, table["PP"]), horner(w, table["PQ"]))
    q = op.Mul(op.Div(const(5.0, x), x), op.Div(horner(w, table["QP"]), horner(w, table["QQ"])))
    angle = op.Sub(x, const(phase, x))
    if kind == "j":
        value = op.Sub(op.Mul(p, op.Cos(angle)), op.Mul(q, op.Sin(angle)))
    else:
        value = op.Add(op.Mul(p, op.Sin(angle)), op.Mul(q, op.Cos(angle)))
    return op.Div(op.Mul(value, const(_SQRT_2_OVER_PI, x)), op.Sqrt(x))


def _j0(x: ir.Value) -> ir.Value:
    table = TABLES["J0"]
    a = op.Abs(x)
    small = op.Min(a, const(5.0, x))
    z = op.Mul(small, small)
    near = op.Div(
        op.Mul(
            op.Mul(
                op.Sub(z, const(5.78318596294678452118, x)),
                op.Sub(z, const(30.4712623436620863991, x)),
            ),
            horner(z, table["RP"]),
        ),
        horner(z, table["RQ"]),
    )
    far = _asymptotic(op.Max(a, const(5.0, x)), 0, math.pi / 4, "j")
    return op.Where(op.LessOrEqual(a, const(5.0, x)), near, far)


def _j1(x: ir.Value) -> ir.Value:
    table = TABLES["J1"]
    a = op.Abs(x)
    small = op.Min(a, const(5.0, x))
    z = op.Mul(small, small)
    near = op.Mul(
        op.Mul(op.Div(horner(z, table["RP"]), horner(z, table["RQ"])), small),
        op.Mul(
            op.Sub(z, const(14.6819706421238932572, x)),
            op.Sub(z, const(49.2184563216946036703, x)),
        ),
    )
    far = _asymptotic(op.Max(a, const(5.0, x)), 1, 3 * math.pi / 4, "j")
    return _odd(x, op.Where(op.LessOrEqual(a, const(5.0, x)), near, far))


def _y(x: ir.Value, order: int) -> ir.Value:
    table = TABLES[f"Y{order}"]
    small = op.Min(op.Max(x, const(1e-30, x)), const(5.0, x))
    z = op.Mul(small, small)
    ratio = op.Div(horner(z, table["YP"]), horner(z, table["YQ"]))
    two_over_pi = const(2.0 / math.pi, x)
    if order == 0:
        near = op.Add(ratio, op.Mul(op.Mul(two_over_pi, op.Log(small)), _j0(small)))
    else:
        bessel = op.Sub(op.Mul(_j1(small), op.Log(small)), op.Reciprocal(small))
        near = op.Add(op.Mul(small, ratio), op.Mul(two_over_pi, bessel))
    phase = math.pi / 4 if order == 0 else 3 * math.pi / 4
    far = _asymptotic(op.Max(x, const(5.0, x)), order, phase, "y")
    result = op.Where(op.LessOrEqual(x, const(5.0, x)), near, far)
    result = op.Where(op.Equal(x, const(0.0, x)), const(-_INF, x), result)
    return op.Where(op.Less(x, const(0.0, x)), const(_NAN, x), result)


@onnx_op("aten::special_bessel_j0")
@float_unary
def aten_special_bessel_j0(x: ir.Value) -> ir.Value:
    """special_bessel_j0(Tensor self)."""
    return _j0(x)


@onnx_op("aten::special_bessel_j1")
@float_unary
def aten_special_bessel_j1(x: ir.Value) -> ir.Value:
    """special_bessel_j1(Tensor self)."""
    return _j1(x)


@onnx_op("aten::special_bessel_y0")
@float_unary
def aten_special_bessel_y0(x: ir.Value) -> ir.Value:
    """special_bessel_y0(Tensor self)."""
    return _y(x, 0)


@onnx_op("aten::special_bessel_y1")
@float_unary
def aten_special_bessel_y1(x: ir.Value) -> ir.Value:
    """special_bessel_y1(Tensor self)."""
    return _y(x, 1)


@onnx_op("aten::special_spherical_bessel_j0")
@float_unary
def aten_special_spherical_bessel_j0(x: ir.Value) -> ir.Value:
    """special_spherical_bessel_j0(Tensor self): sin(x) / x."""
    z = op.Mul(x, x)
    series = horner(z, [1 / 6227020800, -1 / 39916800, 1 / 362880, -1 / 5040, 1 / 120, -1 / 6, 1.0])
    safe = op.Where(op.Equal(x, const(0.0, x)), const(1.0, x), x)
    result = op.Where(op.Less(op.Abs(x), const(0.5, x)), series, op.Div(op.Sin(safe), safe))
    return op.Where(op.IsInf(x), const(0.0, x), result)


# -- Airy Ai ------------------------------------------------------------------------------


def _airy_series(x: ir.Value) -> ir.Value:
    """The Maclaurin series of Ai, for |x| < 2.09 (20 terms: converged in float64)."""
    f: Any = const(1.0, x)
    g: Any = x
    m: Any = const(1.0, x)
    n: Any = x
    cube = op.Mul(op.Mul(x, x), x)
    k = 1.0
    for _ in range(20):
        m = op.Div(op.Mul(m, cube), const((k + 1.0) * (k + 2.0), x))
        n = op.Div(op.Mul(n, cube), const((k + 2.0) * (k + 3.0), x))
        k += 3.0
        f = op.Add(f, m)
        g = op.Add(g, n)
    return op.Sub(
        op.Mul(const(0.355028053887817239260, x), f),
        op.Mul(const(0.258819403792806798405, x), g),
    )


@onnx_op("aten::special_airy_ai")
@float_unary
def aten_special_airy_ai(x: ir.Value) -> ir.Value:
    """special_airy_ai(Tensor self): the Airy function Ai."""
    table = TABLES["AIRY"]
    neg = op.Min(x, const(-2.09, x))
    root = op.Sqrt(op.Neg(neg))
    zeta = op.Mul(op.Mul(neg, root), const(-2.0 / 3.0, x))
    z = op.Reciprocal(zeta)
    z2 = op.Mul(z, z)
    f = op.Add(
        const(1.0, x), op.Mul(z2, op.Div(horner(z2, table["AFN"]), horner(z2, table["AFD"])))
    )
    g = op.Mul(z, op.Div(horner(z2, table["AGN"]), horner(z2, table["AGD"])))
    t = op.Add(zeta, const(0.25 * math.pi, x))
    oscillating = op.Div(
        op.Mul(
            const(5.64189583547756286948e-01, x), op.Sub(op.Mul(op.Sin(t), f), op.Mul(op.Cos(t), g))
        ),
        op.Sqrt(root),
    )
    pos = op.Max(x, const(2.09, x))
    zeta_pos = op.Mul(op.Mul(pos, op.Sqrt(pos)), const(2.0 / 3.0, x))
    inv = op.Reciprocal(zeta_pos)
    decaying = op.Div(
        op.Mul(
            const(5.64189583547756286948e-01, x),
            op.Div(horner(inv, table["AN"]), horner(inv, table["AD"])),
        ),
        op.Mul(op.Mul(const(2.0, x), op.Sqrt(op.Sqrt(pos))), op.Exp(zeta_pos)),
    )
    middle = op.Min(op.Max(x, const(-2.09, x)), const(2.09, x))
    result = op.Where(op.Less(x, const(-2.09, x)), oscillating, _airy_series(middle))
    result = op.Where(op.GreaterOrEqual(x, const(2.09, x)), decaying, result)
    result = op.Where(op.Greater(x, const(103.892, x)), const(0.0, x), result)
    return op.Where(op.IsInf(x), const(_NAN, x), result)


aten_special_modified_bessel_k0 = onnx_op("aten::special_modified_bessel_k0")(
    _k_function(0, scaled=False)
)
aten_special_modified_bessel_k1 = onnx_op("aten::special_modified_bessel_k1")(
    _k_function(1, scaled=False)
)
aten_special_scaled_modified_bessel_k0 = onnx_op("aten::special_scaled_modified_bessel_k0")(
    _k_function(0, scaled=True)
)
aten_special_scaled_modified_bessel_k1 = onnx_op("aten::special_scaled_modified_bessel_k1")(
    _k_function(1, scaled=True)
)
