"""Linear algebra ONNX lacks: LU, triangular solves, Cholesky and what builds on them.

LU with partial pivoting, triangular solves and Cholesky, then what is built on them
(inverse, solve, slogdet, LU solve/unpack), plus the matrix exponential.

ONNX has no factorisation ops, so each algorithm is unrolled over the (static) matrix
size: step ``k`` is a handful of batched tensor ops on whole matrices, with constant
masks selecting the rows and columns it touches. Batch dimensions may be dynamic; the
last two must be static.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    cast_to,
    const,
    ints,
    known_rank,
    known_shape,
    loop,
    op,
    rank,
    static_size,
    unsupported,
)
from onnx_export.ops._opset import Opset
from onnx_export.ops._registration import onnx_op

__all__ = [
    "matrix_size",
    "forward_substitution",
    "back_substitution",
    "eye_like",
    "aten_linalg_solve_triangular",
    "aten_triangular_solve",
    "lu_factor",
    "aten_linalg_lu_factor_ex",
    "aten_linalg_lu",
    "aten_lu_unpack",
    "aten_linalg_lu_solve",
    "aten_linalg_solve_ex",
    "aten_linalg_inv_ex",
    "aten_linalg_slogdet",
    "cholesky_lower",
    "aten_linalg_cholesky_ex",
    "aten_cholesky",
    "aten_cholesky_inverse",
    "aten_cholesky_solve",
    "aten_linalg_matrix_exp",
    "aten__sparse_mm",
    "aten__sparse_addmm",
]

_INT32 = ir.DataType.INT32
_INT64 = ir.DataType.INT64
_END = 2**62


def matrix_size(a: ir.Value) -> tuple[int, int]:
    """The static (rows, columns) of a batch of matrices."""
    dims = known_shape(a)
    if len(dims) < 2:
        raise unsupported("a batch of matrices (rank >= 2)", f"rank {len(dims)}")
    return static_size(dims[-2], "number of rows"), static_size(dims[-1], "number of columns")


def _mask(array: np.ndarray) -> ir.Value:
    return op.Constant(value=ir.tensor(np.asarray(array, dtype=bool)))


def _rows(m: int) -> np.ndarray:
    return np.arange(m).reshape(-1, 1)


def _cols(n: int) -> np.ndarray:
    return np.arange(n).reshape(1, -1)


def eye_like(size: tuple[int, int], like: ir.Value) -> ir.Value:
    """The (rows x columns) identity matrix in ``like``'s dtype."""
    return op.CastLike(op.Constant(value=ir.tensor(np.eye(*size, dtype=np.float32))), like)


def _slice(x: ir.Value, start: int, end: int, axis: int) -> ir.Value:
    return op.Slice(x, ints([start]), ints([end]), ints([axis]))


def _transpose(x: ir.Value) -> ir.Value:
    r = known_rank(x)
    return op.Transpose(x, perm=[*range(r - 2), r - 1, r - 2])


# -- triangular solves -------------------------------------------------------------------


def _substitution(t: ir.Value, b: ir.Value, n: int, unit: bool, order: range) -> ir.Value:
    """Solves T X = B row by row in ``order`` (T triangular, rows outside solved first)."""
    x = op.Add(op.Mul(b, const(0.0, b)), op.Mul(_slice(t, 0, 1, -1), const(0.0, b)))
    for i in order:
        row = _slice(t, i, i + 1, -2)
        partial = op.MatMul(row, x)
        value = op.Sub(_slice(b, i, i + 1, -2), partial)
        if not unit:
            value = op.Div(value, _slice(row, i, i + 1, -1))
        x = op.Where(_mask(_rows(n) == i), value, x)
    return x


def forward_substitution(lower: ir.Value, b: ir.Value, n: int, unit: bool = False) -> ir.Value:
    """X with L X = B, L lower triangular (unit diagonal when ``unit``)."""
    return _substitution(lower, b, n, unit, range(n))


def back_substitution(upper: ir.Value, b: ir.Value, n: int, unit: bool = False) -> ir.Value:
    """X with U X = B, U upper triangular (unit diagonal when ``unit``)."""
    return _substitution(upper, b, n, unit, range(n - 1, -1, -1))


def _triangular(a: ir.Value, b: ir.Value, upper: bool, unit: bool) -> ir.Value:
    n = matrix_size(a)[0]
    solve = back_substitution if upper else forward_substitution
    return solve(a, b, n, unit)


@onnx_op("aten::_sparse_mm")
def aten__sparse_mm(sparse: ir.Value, dense: ir.Value) -> ir.Value:
    """_sparse_mm(Tensor sparse, Tensor dense): ``torch.sparse.mm`` on dense matrices.

    An ONNX graph takes dense inputs; sparse ones are refused at export (pass
    ``.to_dense()``).
    """
    return op.MatMul(sparse, dense)


@onnx_op("aten::_sparse_addmm")
def aten__sparse_addmm(
    self: ir.Value, mat1: ir.Value, mat2: ir.Value, beta: float = 1.0, alpha: float = 1.0
) -> ir.Value:
    """_sparse_addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1).

    ``beta * self + alpha * (mat1 @ mat2)`` on dense matrices (``torch.sparse.addmm``).
    """
    product = op.MatMul(mat1, mat2)
    if alpha != 1:
        product = op.Mul(product, const(alpha, product))
    if beta == 0:  # self is not read (a NaN in it stays out), as in torch
        return product
    scaled = self if beta == 1 else op.Mul(self, const(beta, self))
    return op.Add(scaled, product)


@onnx_op("aten::linalg_solve_triangular")
def aten_linalg_solve_triangular(
    self: ir.Value, B: ir.Value, upper: bool, left: bool = True, unitriangular: bool = False
) -> ir.Value:
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, ...)."""
    if left:
        return _triangular(self, B, upper, unitriangular)
    return _transpose(_triangular(_transpose(self), _transpose(B), not upper, unitriangular))


@onnx_op("aten::triangular_solve")
def aten_triangular_solve(
    self: ir.Value,
    A: ir.Value,
    upper: bool = True,
    transpose: bool = False,
    unitriangular: bool = False,
) -> tuple[ir.Value, ir.Value]:
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, ...)."""
    coefficients = _transpose(A) if transpose else A
    solution = _triangular(coefficients, self, upper != transpose, unitriangular)
    return solution, op.Identity(A)


# -- LU with partial pivoting ------------------------------------------------------------


def _batch_arange(a: ir.Value, m: int) -> ir.Value:
    """0..m-1 along a new last axis, broadcast over ``a``'s batch dimensions."""
    arange = op.Constant(value=ir.tensor(np.arange(m, dtype=np.int64)))
    batch = op.Shape(a, start=0, end=-2)
    return op.Expand(arange, op.Concat(batch, ints([m]), axis=0))


def _swap_rows(
    a: ir.Value, perm: ir.Value, j: int, p: ir.Value, m: int
) -> tuple[ir.Value, ir.Value]:
    """Rows j and p (a [..., 1] index) swapped in ``a`` and in the permutation ``perm``."""
    arange = op.Constant(value=ir.tensor(np.arange(m, dtype=np.int64)))
    j_value = op.Constant(value_int=j)
    order = op.Where(op.Equal(arange, j_value), p, op.Where(op.Equal(arange, p), j_value, arange))
    gather = op.Expand(op.Unsqueeze(order, ints([-1])), op.Shape(a))
    return op.GatherElements(a, gather, axis=-2), op.GatherElements(perm, order, axis=-1)


def lu_factor(a: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(LU, pivots 1-based INT32, row permutation INT64) of A, as LAPACK's getrf."""
    m, n = matrix_size(a)
    k = min(m, n)
    perm = _batch_arange(a, m)
    pivots = []
    zero = const(0.0, a)
    for j in range(k):
        column = op.Squeeze(_slice(a, j, j + 1, -1), ints([-1]))
        candidates = op.Where(_mask(np.arange(m) >= j), op.Abs(column), const(-1.0, a))
        p = op.ArgMax(candidates, axis=-1, keepdims=1)
        a, perm = _swap_rows(a, perm, j, p, m)
        pivots.append(op.Add(p, op.Constant(value_int=1)))
        pivot = _slice(_slice(a, j, j + 1, -2), j, j + 1, -1)
        singular = op.Equal(pivot, zero)
        safe = op.Where(singular, const(1.0, a), pivot)
        below = _mask(_rows(m) > j)
        factors = op.Where(below, op.Div(_slice(a, j, j + 1, -1), safe), zero)
        factors = op.Where(singular, zero, factors)
        right = op.Where(_mask(_cols(n) > j), _slice(a, j, j + 1, -2), zero)
        a = op.Sub(a, op.MatMul(factors, right))
        a = op.Where(_mask((_rows(m) > j) & (_cols(n) == j)), factors, a)
    if not pivots:  # an empty matrix
        shape = op.Concat(op.Shape(a, start=0, end=-2), ints([0]), axis=0)
        return a, op.ConstantOfShape(shape, value=ir.tensor([0], dtype=_INT32)), perm
    return a, op.Cast(op.Concat(*pivots, axis=-1), to=int(_INT32)), perm


def _unpack(lu: ir.Value, m: int, n: int) -> tuple[ir.Value, ir.Value]:
    k = min(m, n)
    lower = op.Trilu(_slice(lu, 0, k, -1), op.Constant(value_int=-1), upper=0)
    lower = op.Add(lower, eye_like((m, k), lu))
    upper = op.Trilu(_slice(lu, 0, k, -2), upper=1)
    return lower, upper


def _permutation_matrix(perm: ir.Value, m: int, like: ir.Value) -> ir.Value:
    """P with A = P L U, from the row order ``perm`` (A[perm] = L U)."""
    one_hot = op.OneHot(
        perm, op.Constant(value_int=m), op.CastLike(op.Constant(value_floats=[0.0, 1.0]), like)
    )
    return _transpose(one_hot)


def _info(a: ir.Value) -> ir.Value:
    return op.ConstantOfShape(op.Shape(a, start=0, end=-2), value=ir.tensor([0], dtype=_INT32))


@onnx_op("aten::linalg_lu_factor_ex")
def aten_linalg_lu_factor_ex(
    A: ir.Value, pivot: bool = True, check_errors: bool = False
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, ...) -> (LU, pivots, info)."""
    if not pivot:
        raise NotImplementedError("LU without pivoting")
    lu, pivots, _ = lu_factor(A)
    return lu, pivots, _info(A)


@onnx_op("aten::linalg_lu")
def aten_linalg_lu(A: ir.Value, pivot: bool = True) -> tuple[ir.Value, ir.Value, ir.Value]:
    """linalg_lu(Tensor A, *, bool pivot=True) -> (P, L, U)."""
    if not pivot:
        raise NotImplementedError("LU without pivoting")
    m, n = matrix_size(A)
    lu, _, perm = lu_factor(A)
    lower, upper = _unpack(lu, m, n)
    return _permutation_matrix(perm, m, A), lower, upper


def _perm_from_pivots(pivots: ir.Value, like: ir.Value, m: int) -> ir.Value:
    perm = _batch_arange(like, m)
    k = static_size((pivots.shape or [None])[-1], "number of pivots")
    for i in range(k):
        p = op.Sub(op.Cast(_slice(pivots, i, i + 1, -1), to=int(_INT64)), op.Constant(value_int=1))
        arange = op.Constant(value=ir.tensor(np.arange(m, dtype=np.int64)))
        i_value = op.Constant(value_int=i)
        order = op.Where(
            op.Equal(arange, i_value), p, op.Where(op.Equal(arange, p), i_value, arange)
        )
        perm = op.GatherElements(perm, order, axis=-1)
    return perm


@onnx_op("aten::lu_unpack")
def aten_lu_unpack(
    LU_data: ir.Value, LU_pivots: ir.Value, unpack_data: bool = True, unpack_pivots: bool = True
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, ...) -> (P, L, U)."""
    m, n = matrix_size(LU_data)
    lower, upper = _unpack(LU_data, m, n)
    perm = _perm_from_pivots(LU_pivots, LU_data, m)
    return _permutation_matrix(perm, m, LU_data), lower, upper


def _solve_with_lu(lu: ir.Value, perm: ir.Value, b: ir.Value, n: int, adjoint: bool) -> ir.Value:
    """X with A X = B (or A^T X = B when ``adjoint``), where A[perm] = L U."""
    if not adjoint:
        full = op.Add(b, op.Mul(_slice(lu, 0, 1, -1), const(0.0, b)))  # batch-broadcast B
        index = op.Expand(op.Unsqueeze(perm, ints([-1])), op.Shape(full))
        permuted = op.GatherElements(full, index, axis=-2)
        y = forward_substitution(lu, permuted, n, unit=True)
        return back_substitution(lu, y, n)
    z = forward_substitution(_transpose(lu), b, n)
    w = back_substitution(_transpose(lu), z, n, unit=True)
    index = op.Expand(op.Unsqueeze(perm, ints([-1])), op.Shape(w))
    return op.ScatterElements(op.Mul(w, const(0.0, w)), index, w, axis=-2)


@onnx_op("aten::linalg_lu_solve")
def aten_linalg_lu_solve(
    LU: ir.Value, pivots: ir.Value, B: ir.Value, left: bool = True, adjoint: bool = False
) -> ir.Value:
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint)."""
    n = matrix_size(LU)[0]
    perm = _perm_from_pivots(pivots, LU, n)
    if left:
        return _solve_with_lu(LU, perm, B, n, adjoint)
    return _transpose(_solve_with_lu(LU, perm, _transpose(B), n, not adjoint))


def _solve(a: ir.Value, b: ir.Value, left: bool) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    n = matrix_size(a)[0]
    lu, pivots, perm = lu_factor(a)
    vector = rank(b) == 1 or (
        rank(b) == (rank(a) or 0) - 1
        and b.shape is not None
        and a.shape is not None
        and list(b.shape) == list(a.shape)[:-1]
    )
    rhs = op.Unsqueeze(b, ints([-1])) if vector else b
    if left:
        x = _solve_with_lu(lu, perm, rhs, n, adjoint=False)
    else:
        x = _transpose(_solve_with_lu(lu, perm, _transpose(rhs), n, adjoint=True))
    if vector:
        x = op.Squeeze(x, ints([-1]))
    return x, lu, pivots, _info(a)


@onnx_op("aten::_linalg_solve_ex")
def aten_linalg_solve_ex(
    A: ir.Value, B: ir.Value, left: bool = True, check_errors: bool = False
) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, ...) -> (X, LU, pivots, info)."""
    return _solve(A, B, left)


@onnx_op("aten::linalg_inv_ex")
def aten_linalg_inv_ex(A: ir.Value, check_errors: bool = False) -> tuple[ir.Value, ir.Value]:
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (inverse, info)."""
    n = matrix_size(A)[0]
    identity = op.Add(eye_like((n, n), A), op.Mul(A, const(0.0, A)))
    x, _, _, info = _solve(A, identity, True)
    return x, info


@onnx_op("aten::_linalg_slogdet")
def aten_linalg_slogdet(A: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """_linalg_slogdet(Tensor A) -> (sign, logabsdet, LU, pivots)."""
    n = matrix_size(A)[0]
    lu, pivots, _ = lu_factor(A)
    diagonal = op.ReduceSum(op.Mul(lu, eye_like((n, n), lu)), ints([-1]), keepdims=0)
    swaps = op.Not(
        op.Equal(pivots, op.Constant(value=ir.tensor(np.arange(1, n + 1, dtype=np.int32))))
    )
    odd = op.Equal(
        op.Mod(
            op.ReduceSum(op.Cast(swaps, to=int(_INT64)), ints([-1]), keepdims=0),
            op.Constant(value_int=2),
        ),
        op.Constant(value_int=1),
    )
    sign = op.ReduceProd(op.Sign(diagonal), ints([-1]), keepdims=0)
    sign = op.Where(odd, op.Neg(sign), sign)
    logabsdet = op.ReduceSum(op.Log(op.Abs(diagonal)), ints([-1]), keepdims=0)
    return sign, logabsdet, lu, pivots


# -- Cholesky ----------------------------------------------------------------------------


def cholesky_lower(a: ir.Value) -> ir.Value:
    """L with A = L L^T (column by column)."""
    n = matrix_size(a)[0]
    lower = op.Mul(a, const(0.0, a))
    for j in range(n):
        row = _slice(lower, j, j + 1, -2)
        column = op.Sub(_slice(a, j, j + 1, -1), op.MatMul(lower, _transpose(row)))
        diagonal = op.Sqrt(_slice(column, j, j + 1, -2))
        new = op.Where(_mask(_rows(n) == j), diagonal, op.Div(column, diagonal))
        new = op.Where(_mask(_rows(n) >= j), new, const(0.0, a))
        lower = op.Where(_mask(_cols(n) == j), new, lower)
    return lower


@onnx_op("aten::linalg_cholesky_ex")
def aten_linalg_cholesky_ex(
    self: ir.Value, upper: bool = False, check_errors: bool = False
) -> tuple[ir.Value, ir.Value]:
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, ...) -> (L, info)."""
    lower = cholesky_lower(self)
    return (_transpose(lower) if upper else lower), _info(self)


@onnx_op("aten::cholesky")
def aten_cholesky(self: ir.Value, upper: bool = False) -> ir.Value:
    """cholesky(Tensor self, bool upper=False) -> Tensor."""
    lower = cholesky_lower(self)
    return _transpose(lower) if upper else lower


@onnx_op("aten::cholesky_inverse")
def aten_cholesky_inverse(self: ir.Value, upper: bool = False) -> ir.Value:
    """cholesky_inverse(Tensor self, bool upper=False): the inverse of L L^T (or U^T U)."""
    n = matrix_size(self)[0]
    identity = op.Add(eye_like((n, n), self), op.Mul(self, const(0.0, self)))
    if upper:
        inverse = back_substitution(self, identity, n)
        return op.MatMul(inverse, _transpose(inverse))
    inverse = forward_substitution(self, identity, n)
    return op.MatMul(_transpose(inverse), inverse)


@onnx_op("aten::cholesky_solve")
def aten_cholesky_solve(self: ir.Value, input2: ir.Value, upper: bool = False) -> ir.Value:
    """cholesky_solve(Tensor self, Tensor input2, bool upper=False): X with A X = self."""
    n = matrix_size(input2)[0]
    factor = _transpose(input2) if upper else input2
    y = forward_substitution(factor, self, n)
    return back_substitution(_transpose(factor), y, n)


# -- matrix exponential ------------------------------------------------------------------

_TAYLOR_TERMS = 18


@onnx_op("aten::linalg_matrix_exp")
def aten_linalg_matrix_exp(self: ir.Value) -> ir.Value:
    """linalg_matrix_exp(Tensor self): scaling and squaring of a Taylor series (float64)."""
    n = matrix_size(self)[0]
    a = cast_to(self, ir.DataType.DOUBLE)
    norm = op.ReduceMax(op.ReduceSum(op.Abs(a), ints([-2]), keepdims=0), keepdims=0)
    exponent = op.Ceil(op.Div(op.Log(norm), const(math.log(2.0), norm)))
    exponent = op.Max(exponent, const(0.0, norm))
    exponent = op.Where(op.IsNaN(exponent), const(0.0, norm), exponent)
    scaled = op.Div(a, op.Pow(const(2.0, norm), exponent))
    identity = op.Add(eye_like((n, n), a), op.Mul(a, const(0.0, a)))
    total, term = identity, identity
    for i in range(1, _TAYLOR_TERMS + 1):
        term = op.Div(op.MatMul(term, scaled), const(float(i), a))
        total = op.Add(total, term)

    def square(sub: Opset, i: ir.Value, value: ir.Value) -> list[ir.Value]:
        return [sub.MatMul(value, value)]

    squared = loop(square, op.Cast(exponent, to=int(_INT64)), [total])[0]
    return cast_to(squared, self.dtype)
