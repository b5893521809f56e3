"""QR (Householder, as LAPACK's geqrf) and Jacobi eigen/singular value decompositions.

Like ``linalg``, every algorithm is unrolled over the static matrix size.
Jacobi runs a fixed number of cyclic sweeps in float64 (quadratic convergence: 8 sweeps
are ample for the matrix sizes unrolling suits). Eigenvectors and singular vectors are
unique only up to sign, so only the sign-free results match LAPACK's: values, ranks,
pseudo-inverses, norms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    cast_to,
    const,
    empty,
    ints,
    op,
    output_dtype,
    static_size,
)
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.linalg import _slice, _transpose, eye_like, matrix_size

__all__ = [
    "aten_linalg_qr",
    "aten_geqrf",
    "aten_linalg_householder_product",
    "aten_ormqr",
    "aten_linalg_svd",
    "aten_linalg_eigh",
    "aten_linalg_matrix_sqrth",
    "aten_linalg_polar",
    "aten_linalg_pinv",
    "aten_linalg_matrix_rank",
]

_DOUBLE = ir.DataType.DOUBLE
_SWEEPS = 8


def _mask(array: np.ndarray) -> ir.Value:
    return op.Constant(value=ir.tensor(np.asarray(array, dtype=bool)))


# -- Householder QR ----------------------------------------------------------------------


def _householder(a: ir.Value) -> tuple[Any, list[ir.Value], list[ir.Value]]:
    """(R with the reflectors' tails below it, the reflectors v_j, the factors tau_j)."""
    m, n = matrix_size(a)
    rows = np.arange(m).reshape(-1, 1)
    zero = const(0.0, a)
    vectors, taus = [], []
    for j in range(min(m, n)):
        column = _slice(a, j, j + 1, -1)
        alpha = _slice(column, j, j + 1, -2)
        tail = op.Where(_mask(rows > j), column, zero)
        tail_norm2 = op.ReduceSum(op.Mul(tail, tail), ints([-2]), keepdims=1)
        norm = op.Sqrt(op.Add(op.Mul(alpha, alpha), tail_norm2))
        beta = op.Where(op.GreaterOrEqual(alpha, zero), op.Neg(norm), norm)
        no_reflection = op.Equal(tail_norm2, zero)
        denominator = op.Sub(alpha, beta)
        safe = op.Where(op.Equal(denominator, zero), const(1.0, a), denominator)
        v = op.Where(_mask(rows == j), const(1.0, a), op.Div(tail, safe))
        tau = op.Where(
            no_reflection,
            zero,
            op.Div(op.Sub(beta, alpha), op.Where(op.Equal(beta, zero), const(1.0, a), beta)),
        )
        v = op.Where(no_reflection, op.Where(_mask(rows == j), const(1.0, a), zero), v)
        later = op.Where(_mask((np.arange(n) > j).reshape(1, -1)), a, zero)
        a = op.Sub(a, op.Mul(tau, op.MatMul(v, op.MatMul(_transpose(v), later))))
        diagonal = op.Where(no_reflection, alpha, beta)
        stored = op.Where(_mask(rows == j), diagonal, op.Where(_mask(rows > j), v, column))
        a = op.Where(_mask((np.arange(n) == j).reshape(1, -1)), stored, a)
        vectors.append(v)
        taus.append(tau)
    return a, vectors, taus


def _apply_reflectors(
    q: ir.Value, vectors: Sequence[Any], taus: Sequence[Any], reverse: bool
) -> ir.Value:
    """H_0 H_1 ... H_{k-1} Q (``reverse``) or H_{k-1} ... H_0 Q."""
    order = list(zip(vectors, taus, strict=True))
    for v, tau in reversed(order) if reverse else order:
        q = op.Sub(q, op.Mul(tau, op.MatMul(v, op.MatMul(_transpose(v), q))))
    return q


def _reflectors_from(compact: ir.Value, tau: ir.Value) -> tuple[list[ir.Value], list[ir.Value]]:
    """The v_j (implicit unit diagonal) and tau_j stored LAPACK-style."""
    m = matrix_size(compact)[0]
    k = static_size((tau.shape or [None])[-1], "number of Householder reflectors")
    rows = np.arange(m).reshape(-1, 1)
    vectors, taus = [], []
    for j in range(k):
        column = _slice(compact, j, j + 1, -1)
        v = op.Where(
            _mask(rows == j),
            const(1.0, compact),
            op.Where(_mask(rows > j), column, const(0.0, compact)),
        )
        vectors.append(v)
        taus.append(op.Unsqueeze(_slice(tau, j, j + 1, -1), ints([-1])))
    return vectors, taus


def _identity_batch(a: ir.Value, size: tuple[int, int]) -> ir.Value:
    return op.Add(eye_like(size, a), op.Mul(_slice(_slice(a, 0, 1, -1), 0, 1, -2), const(0.0, a)))


@onnx_op("aten::linalg_qr")
def aten_linalg_qr(A: ir.Value, mode: str = "reduced") -> tuple[ir.Value, ir.Value]:
    """linalg_qr(Tensor A, str mode="reduced") -> (Q, R)."""
    m, n = matrix_size(A)
    k = min(m, n)
    compact, vectors, taus = _householder(A)
    r = op.Trilu(compact, upper=1)
    if mode == "r":
        return empty(output_dtype(0, A.dtype)), _slice(r, 0, k, -2)
    q = _apply_reflectors(_identity_batch(A, (m, m)), vectors, taus, reverse=True)
    if mode == "complete":
        return q, r
    return _slice(q, 0, k, -1), _slice(r, 0, k, -2)


@onnx_op("aten::geqrf")
def aten_geqrf(self: ir.Value) -> tuple[ir.Value, ir.Value]:
    """geqrf(Tensor self) -> (Tensor a, Tensor tau): LAPACK's compact QR."""
    compact, _, taus = _householder(self)
    return compact, op.Squeeze(op.Concat(*taus, axis=-1), ints([-2]))


@onnx_op("aten::linalg_householder_product")
def aten_linalg_householder_product(input: ir.Value, tau: ir.Value) -> ir.Value:
    """linalg_householder_product(Tensor input, Tensor tau): the first n columns of Q."""
    m, n = matrix_size(input)
    vectors, taus = _reflectors_from(input, tau)
    q = _apply_reflectors(_identity_batch(input, (m, m)), vectors, taus, reverse=True)
    return _slice(q, 0, n, -1)


@onnx_op("aten::ormqr")
def aten_ormqr(
    self: ir.Value, input2: ir.Value, input3: ir.Value, left: bool = True, transpose: bool = False
) -> ir.Value:
    """ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False)."""
    m = matrix_size(self)[0]
    vectors, taus = _reflectors_from(self, input2)
    q = _apply_reflectors(_identity_batch(self, (m, m)), vectors, taus, reverse=True)
    if transpose:
        q = _transpose(q)
    return op.MatMul(q, input3) if left else op.MatMul(input3, q)


# -- Jacobi rotations --------------------------------------------------------------------


def _rotation(c: ir.Value, s: ir.Value, p: int, q: int, n: int) -> ir.Value:
    """The batched n x n rotation J with c at (p, p), (q, q), s at (p, q), -s at (q, p)."""
    diagonal = np.zeros([n, n])
    diagonal[p, p] = diagonal[q, q] = 1.0
    upper = np.zeros([n, n])
    upper[p, q] = 1.0
    lower = np.zeros([n, n])
    lower[q, p] = 1.0
    like = c
    rotation = op.Add(
        eye_like((n, n), like),
        op.Mul(
            op.Sub(c, const(1.0, like)),
            op.CastLike(op.Constant(value=ir.tensor(diagonal.astype(np.float32))), like),
        ),
    )
    skew = op.CastLike(op.Constant(value=ir.tensor((upper - lower).astype(np.float32))), like)
    return op.Add(rotation, op.Mul(s, skew))


def _angle(numerator: ir.Value, off: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(c, s) of the rotation zeroing an off-diagonal ``off`` with ``numerator`` = (b - a) / 2."""
    zero = const(0.0, off)
    one = const(1.0, off)
    zeroed = op.Equal(off, zero)
    safe = op.Where(zeroed, one, off)
    zeta = op.Div(numerator, safe)
    sign = op.Where(op.GreaterOrEqual(zeta, zero), one, op.Neg(one))
    t = op.Div(sign, op.Add(op.Abs(zeta), op.Sqrt(op.Add(op.Mul(zeta, zeta), one))))
    t = op.Where(zeroed, zero, t)
    c = op.Reciprocal(op.Sqrt(op.Add(op.Mul(t, t), one)))
    return c, op.Mul(c, t)


def _element(a: ir.Value, i: int, j: int) -> ir.Value:
    return _slice(_slice(a, i, i + 1, -2), j, j + 1, -1)


def _symmetric_eigen(a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(eigenvalues unsorted [..., n], eigenvectors as columns) of symmetric A (float64)."""
    n = matrix_size(a)[0]
    vectors = _identity_batch(a, (n, n))
    for _ in range(_SWEEPS):
        for p in range(n):
            for q in range(p + 1, n):
                half = op.Div(op.Sub(_element(a, q, q), _element(a, p, p)), const(2.0, a))
                c, s = _angle(half, _element(a, p, q))
                rotation = _rotation(c, s, p, q, n)
                a = op.MatMul(_transpose(rotation), op.MatMul(a, rotation))
                vectors = op.MatMul(vectors, rotation)
    values = op.ReduceSum(op.Mul(a, eye_like((n, n), a)), ints([-1]), keepdims=0)
    return values, vectors


def _one_sided(b: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Hestenes' one-sided Jacobi on B (m >= n): (rotated B = U diag(s), V, s unsorted)."""
    n = matrix_size(b)[1]
    v = _identity_batch(b, (n, n))
    for _ in range(_SWEEPS):
        for p in range(n):
            for q in range(p + 1, n):
                bp, bq = _slice(b, p, p + 1, -1), _slice(b, q, q + 1, -1)
                alpha = op.ReduceSum(op.Mul(bp, bp), ints([-2]), keepdims=1)
                beta = op.ReduceSum(op.Mul(bq, bq), ints([-2]), keepdims=1)
                gamma = op.ReduceSum(op.Mul(bp, bq), ints([-2]), keepdims=1)
                c, s = _angle(op.Div(op.Sub(beta, alpha), const(2.0, b)), gamma)
                rotation = _rotation(c, s, p, q, n)
                b = op.MatMul(b, rotation)
                v = op.MatMul(v, rotation)
    singular = op.Sqrt(op.ReduceSum(op.Mul(b, b), ints([-2]), keepdims=0))
    return b, v, singular


def _sorted_columns(
    values: ir.Value, columns: ir.Value, n: int, descending: bool
) -> tuple[ir.Value, ir.Value]:
    """``values`` sorted along the last axis and ``columns``' columns in the same order."""
    ordered, order = op.TopK(values, ints([n]), axis=-1, largest=int(descending), sorted=1)
    index = op.Expand(op.Unsqueeze(order, ints([-2])), op.Shape(columns))
    return ordered, op.GatherElements(columns, index, axis=-1)


def _svd(a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(U, S descending, V) of A (float64), reduced: U is m x k, V is n x k."""
    m, n = matrix_size(a)
    flipped = m < n
    b = _transpose(a) if flipped else a
    k = min(m, n)
    rotated, v, singular = _one_sided(b)
    singular, v = _sorted_columns(singular, v, k, descending=True)
    _, rotated = _sorted_columns(
        op.Sqrt(op.ReduceSum(op.Mul(rotated, rotated), ints([-2]), keepdims=0)),
        rotated,
        k,
        descending=True,
    )
    safe = op.Where(op.Equal(singular, const(0.0, a)), const(1.0, a), singular)
    u = op.Div(rotated, op.Unsqueeze(safe, ints([-2])))
    return (v, singular, u) if flipped else (u, singular, v)


@onnx_op("aten::_linalg_svd")
def aten_linalg_svd(
    A: ir.Value, full_matrices: bool = False, compute_uv: bool = True, driver: str | None = None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_linalg_svd(Tensor A, ...) -> (U, S, Vh); the vectors' signs may differ from LAPACK's."""
    m, n = matrix_size(A)
    if m == 0 and n == 0:  # nothing to decompose
        no_values = op.ReduceSum(A, ints([-1]), keepdims=0)
        if not compute_uv:
            return empty(output_dtype(0, A.dtype)), no_values, empty(output_dtype(2, A.dtype))
        return op.Identity(A), no_values, op.Identity(A)
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError("full_matrices=True for non-square matrices")
    u, values, v = _svd(cast_to(A, _DOUBLE))
    values = cast_to(values, output_dtype(1, A.dtype))
    if not compute_uv:
        return empty(output_dtype(0, A.dtype)), values, empty(output_dtype(2, A.dtype))
    return cast_to(u, A.dtype), values, cast_to(_transpose(v), A.dtype)


def _symmetrized(a: ir.Value, uplo: str) -> ir.Value:
    lower = uplo.upper() == "L"
    triangle = op.Trilu(a, upper=0) if lower else op.Trilu(a, upper=1)
    strict = op.Trilu(a, op.Constant(value_int=-1 if lower else 1), upper=0 if lower else 1)
    return op.Add(triangle, _transpose(strict))


@onnx_op("aten::_linalg_eigh")
def aten_linalg_eigh(
    A: ir.Value, UPLO: str = "L", compute_v: bool = True
) -> tuple[ir.Value, ir.Value]:
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (values, vectors).

    Eigenvalues ascending; the eigenvectors' signs may differ from LAPACK's.
    """
    n = matrix_size(A)[0]
    values, vectors = _symmetric_eigen(cast_to(_symmetrized(A, UPLO), _DOUBLE))
    ascending, vectors = _sorted_columns(values, vectors, n, descending=False)
    values = cast_to(ascending, output_dtype(0, A.dtype))
    if not compute_v:
        return values, empty(output_dtype(1, A.dtype))
    return values, cast_to(vectors, A.dtype)


@onnx_op("aten::linalg_matrix_sqrth")
def aten_linalg_matrix_sqrth(self: ir.Value) -> ir.Value:
    """linalg_matrix_sqrth(Tensor self) -> Tensor (torch >= 2.14).

    V diag(sqrt(values)) V^T from the lower triangle's eigen-decomposition: the vectors'
    signs cancel in the product, so the result is torch's.
    """
    values, vectors = _symmetric_eigen(cast_to(_symmetrized(self, "L"), _DOUBLE))
    roots = op.Sqrt(op.Max(values, const(0.0, values)))
    scaled = op.Mul(vectors, op.Unsqueeze(roots, ints([-2])))
    return cast_to(op.MatMul(scaled, _transpose(vectors)), self.dtype)


@onnx_op("aten::linalg_polar")
def aten_linalg_polar(A: ir.Value) -> tuple[ir.Value, ir.Value]:
    """linalg_polar(Tensor A) -> (U, H) with A = U H (torch >= 2.14).

    From the thin SVD A = W S Vh: U = W Vh and H = Vh^T S Vh; the singular vectors'
    signs cancel in both products.
    """
    w, values, vh = aten_linalg_svd(A, full_matrices=False)
    unitary = op.MatMul(w, vh)
    positive = op.MatMul(_transpose(vh), op.Mul(op.Unsqueeze(values, ints([-1])), vh))
    return unitary, positive


def _tolerance(
    largest: ir.Value,
    atol: ir.Value | float | None,
    rtol: ir.Value | float | None,
    eps: float,
    size: int,
) -> ir.Value:
    """max(atol, rtol * largest), torch's defaults when unset."""
    zero = const(0.0, largest)
    atol_value = op.CastLike(atol, largest) if atol is not None else zero
    if rtol is not None:
        rtol_value = op.CastLike(rtol, largest)
    elif atol is not None:
        rtol_value = op.Where(op.Greater(atol_value, zero), zero, const(eps * size, largest))
    else:
        rtol_value = const(eps * size, largest)
    return op.Max(atol_value, op.Mul(rtol_value, largest))


def _eps(dtype: ir.DataType | None) -> float:
    return float(np.finfo(np.float64 if dtype == _DOUBLE else np.float32).eps)


@onnx_op("aten::linalg_pinv.atol_rtol_tensor")
def aten_linalg_pinv(
    self: ir.Value, atol: Any = None, rtol: Any = None, hermitian: bool = False
) -> ir.Value:
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol, Tensor? rtol, bool hermitian)."""
    m, n = matrix_size(self)
    a = cast_to(self, _DOUBLE)
    eps = _eps(self.dtype)
    if hermitian:
        values, vectors = _symmetric_eigen(_symmetrized(a, "L"))
        largest = op.ReduceMax(op.Abs(values), ints([-1]), keepdims=1)
        cutoff = _tolerance(largest, atol, rtol, eps, n)
        keep = op.Greater(op.Abs(values), cutoff)
        inverse = op.Where(
            keep, op.Reciprocal(op.Where(keep, values, const(1.0, a))), const(0.0, a)
        )
        result = op.MatMul(op.Mul(vectors, op.Unsqueeze(inverse, ints([-2]))), _transpose(vectors))
        return cast_to(result, self.dtype)
    flipped = m < n
    b = _transpose(a) if flipped else a
    rotated, v, singular = _one_sided(b)
    largest = op.ReduceMax(singular, ints([-1]), keepdims=1)
    cutoff = _tolerance(largest, atol, rtol, eps, max(m, n))
    keep = op.Greater(singular, cutoff)
    squared = op.Where(keep, op.Mul(singular, singular), const(1.0, a))
    weights = op.Where(keep, op.Reciprocal(squared), const(0.0, a))
    result = op.MatMul(op.Mul(v, op.Unsqueeze(weights, ints([-2]))), _transpose(rotated))
    return cast_to(_transpose(result) if flipped else result, self.dtype)


@onnx_op("aten::linalg_matrix_rank.atol_rtol_tensor")
def aten_linalg_matrix_rank(
    input: ir.Value, atol: Any = None, rtol: Any = None, hermitian: bool = False
) -> ir.Value:
    """linalg_matrix_rank.atol_rtol_tensor(Tensor input, *, Tensor? atol, ...) -> Tensor."""
    m, n = matrix_size(input)
    a = cast_to(input, _DOUBLE)
    if hermitian:
        values = op.Abs(_symmetric_eigen(_symmetrized(a, "L"))[0])
    else:
        values = _one_sided(_transpose(a) if m < n else a)[2]
    largest = op.ReduceMax(values, ints([-1]), keepdims=1)
    cutoff = _tolerance(largest, atol, rtol, _eps(input.dtype), max(m, n))
    count = op.ReduceSum(
        op.Cast(op.Greater(values, cutoff), to=int(ir.DataType.INT64)), ints([-1]), keepdims=0
    )
    return count
