"""SymInt, SymFloat and SymBool arithmetic as ONNX scalar ops.

With dynamic shapes, torch.export leaves Python-level arithmetic on sizes in the graph:
``operator.floordiv(s0, 2)``, ``torch.sym_max(s0, s1)``, ``math.ceil(s0 / 3)``,
``aten.sym_size.int(x, 0)``... Each becomes a few ONNX ops on 0-D tensors: SymInt as
INT64, SymFloat as FLOAT, SymBool as BOOL (the dtypes :func:`onnx_export._dtypes.value_dtype`
gives them). Python's semantics are kept where ONNX's differ: floor division and modulo
round towards minus infinity, ``int()`` and ``math.trunc`` towards zero, ``/`` of ints is
a float.

Our functions here take precedence over torchlib's ``_operator::*`` (which compute
floor division of integers as truncation, and ``sym_size`` with a negative ``dim`` as an
empty slice); a user-registered function for the same target wins over ours.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnx_export._registry import OnnxFunctionEntry, OnnxRegistry, target_name
from onnx_export.ops._common import fx_output_dtypes, op
from onnx_export.ops.sizes import (
    aten_sym_numel,
    aten_sym_size,
    aten_sym_storage_offset,
    aten_sym_stride,
)
from onnx_export.translation._dispatch import Dispatch

__all__ = ["SYMBOLIC_FUNCTIONS", "symbolic_function", "symbolic_dispatch"]

_INT = ir.DataType.INT64
_FLOAT = ir.DataType.FLOAT
_BOOL = ir.DataType.BOOL

Scalar = Any  # an ir.Value (0-D) or a Python bool/int/float


def _value(x: Scalar) -> Any:
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, bool):
        return op.Constant(value=ir.tensor(x, dtype=_BOOL))
    if isinstance(x, int):
        return op.Constant(value=ir.tensor(x, dtype=_INT))
    if isinstance(x, float):
        return op.Constant(value=ir.tensor(x, dtype=_FLOAT))
    raise TypeError(f"expected a symbolic or Python scalar, got {type(x).__name__}")


def _dtype(x: Scalar) -> ir.DataType:
    if isinstance(x, ir.Value):
        return x.dtype or _INT
    if isinstance(x, bool):
        return _BOOL
    return _FLOAT if isinstance(x, float) else _INT


def _cast(x: Any, dtype: ir.DataType) -> Any:
    return x if x.dtype == dtype else op.Cast(x, to=int(dtype))


def _promoted(*xs: Scalar, numeric: bool = True) -> tuple[list[Any], ir.DataType]:
    """Operands as one dtype, as Python mixes them: float if any is, bools as ints."""
    dtypes = {_dtype(x) for x in xs}
    if _FLOAT in dtypes or ir.DataType.DOUBLE in dtypes:
        dtype = _FLOAT
    elif dtypes == {_BOOL} and not numeric:
        dtype = _BOOL
    else:
        dtype = _INT
    return [_cast(_value(x), dtype) for x in xs], dtype


def _binary(name: str) -> Callable[[Scalar, Scalar], Any]:
    def function(a: Scalar, b: Scalar) -> Any:
        (x, y), _ = _promoted(a, b)
        return getattr(op, name)(x, y)

    function.__name__ = f"sym_{name.lower()}"
    return function


def _compare(name: str) -> Callable[[Scalar, Scalar], Any]:
    def function(a: Scalar, b: Scalar) -> Any:
        (x, y), _ = _promoted(a, b, numeric=name not in ("Equal",))
        return getattr(op, name)(x, y)

    function.__name__ = f"sym_{name.lower()}"
    return function


def sym_ne(a: Scalar, b: Scalar) -> Any:
    """``a != b``."""
    (x, y), _ = _promoted(a, b, numeric=False)
    return op.Not(op.Equal(x, y))


def sym_floordiv(a: Scalar, b: Scalar) -> Any:
    """``a // b``: rounds towards minus infinity (ONNX's integer ``Div`` truncates)."""
    (x, y), dtype = _promoted(a, b)
    if dtype == _FLOAT:
        return op.Floor(op.Div(x, y))
    return op.Div(op.Sub(x, op.Mod(x, y, fmod=0)), y)  # exact: x - x mod y is a multiple


def sym_mod(a: Scalar, b: Scalar) -> Any:
    """``a % b``: the sign of the divisor, as in Python."""
    (x, y), dtype = _promoted(a, b)
    if dtype == _FLOAT:
        return op.Sub(x, op.Mul(op.Floor(op.Div(x, y)), y))
    return op.Mod(x, y, fmod=0)


def sym_truediv(a: Scalar, b: Scalar) -> Any:
    """``a / b``: a float, also for ints."""
    return op.Div(_cast(_value(a), _FLOAT), _cast(_value(b), _FLOAT))


def sym_pow(a: Scalar, b: Scalar) -> Any:
    """``a ** b``: an int when the graph says so (non-negative int exponent)."""
    out = fx_output_dtypes()
    (x, y), dtype = _promoted(a, b)
    if out and out[0] == _INT and dtype == _INT:
        return op.Pow(x, y)
    return op.Pow(_cast(x, _FLOAT), _cast(y, _FLOAT))


def sym_neg(a: Scalar) -> Any:
    """``-a``."""
    (x,), _ = _promoted(a)
    return op.Neg(x)


def sym_abs(a: Scalar) -> Any:
    """``abs(a)``."""
    (x,), _ = _promoted(a)
    return op.Abs(x)


def _logical(logical: str, bitwise: str) -> Callable[[Scalar, Scalar], Any]:
    def function(a: Scalar, b: Scalar) -> Any:
        (x, y), dtype = _promoted(a, b, numeric=False)
        return getattr(op, logical if dtype == _BOOL else bitwise)(x, y)

    function.__name__ = f"sym_{logical.lower()}"
    return function


def sym_not(a: Scalar) -> Any:
    """``torch.sym_not(a)`` / ``not a``."""
    return op.Not(_cast(_value(a), _BOOL))


def sym_float(a: Scalar) -> Any:
    """``torch.sym_float(a)``."""
    return _cast(_value(a), _FLOAT)


def _trunc(x: Any) -> Any:
    """Round a float towards zero (ONNX has no Trunc)."""
    return op.Mul(op.Sign(x), op.Floor(op.Abs(x)))


def sym_int(a: Scalar) -> Any:
    """``torch.sym_int(a)`` / ``int(a)``: towards zero."""
    x = _value(a)
    if x.dtype == _FLOAT:
        return op.Cast(_trunc(x), to=int(_INT))
    return _cast(x, _INT)


def _rounding(name: str) -> Callable[[Scalar], Any]:
    def function(a: Scalar) -> Any:
        x = _value(a)
        if x.dtype != _FLOAT:
            return _cast(x, _INT)  # math.ceil of an int is the int
        rounded = _trunc(x) if name == "trunc" else getattr(op, name.capitalize())(x)
        return op.Cast(rounded, to=int(_INT))

    function.__name__ = f"math_{name}"
    return function


def math_sqrt(a: Scalar) -> Any:
    """``math.sqrt(a)``."""
    return op.Sqrt(_cast(_value(a), _FLOAT))


def sym_max(a: Scalar, b: Scalar) -> Any:
    """``torch.sym_max(a, b)``."""
    (x, y), _ = _promoted(a, b)
    return op.Max(x, y)


def sym_min(a: Scalar, b: Scalar) -> Any:
    """``torch.sym_min(a, b)``."""
    (x, y), _ = _promoted(a, b)
    return op.Min(x, y)


def sym_sum(args: Sequence[Scalar]) -> Any:
    """``torch.sym_sum(args)`` (ONNX's ``Sum`` takes floats only: a chain of ``Add``)."""
    if not args:
        return _value(0)
    values, _ = _promoted(*args)
    total = values[0]
    for value in values[1:]:
        total = op.Add(total, value)
    return total


def sym_ite(condition: Scalar, a: Scalar, b: Scalar) -> Any:
    """``torch.sym_ite(condition, a, b)``: ``a if condition else b``."""
    (x, y), _ = _promoted(a, b, numeric=False)
    return op.Where(_cast(_value(condition), _BOOL), x, y)


def runtime_assertion(*args: Any, **kwargs: Any) -> None:
    """``_assert_scalar`` and the like inside loop and branch bodies: nothing to compute."""
    return None


#: Our function for each symbolic target, keyed by the FX node's target.
SYMBOLIC_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    operator.add: _binary("Add"),
    operator.sub: _binary("Sub"),
    operator.mul: _binary("Mul"),
    operator.floordiv: sym_floordiv,
    operator.mod: sym_mod,
    operator.truediv: sym_truediv,
    operator.pow: sym_pow,
    operator.neg: sym_neg,
    operator.abs: sym_abs,
    builtins.abs: sym_abs,
    operator.eq: _compare("Equal"),
    operator.ne: sym_ne,
    operator.lt: _compare("Less"),
    operator.le: _compare("LessOrEqual"),
    operator.gt: _compare("Greater"),
    operator.ge: _compare("GreaterOrEqual"),
    operator.and_: _logical("And", "BitwiseAnd"),
    operator.or_: _logical("Or", "BitwiseOr"),
    operator.xor: _logical("Xor", "BitwiseXor"),
    operator.not_: sym_not,
    torch.sym_not: sym_not,
    torch.sym_float: sym_float,
    torch.sym_int: sym_int,
    torch.sym_max: sym_max,
    torch.sym_min: sym_min,
    torch.sym_sum: sym_sum,
    torch.sym_ite: sym_ite,
    math.ceil: _rounding("ceil"),
    math.floor: _rounding("floor"),
    math.trunc: _rounding("trunc"),
    math.sqrt: math_sqrt,
    torch._sym_sqrt: math_sqrt,  # type: ignore[attr-defined]  # torch leaves it untyped
    torch.ops.aten.sym_size.int: aten_sym_size,
    torch.ops.aten.sym_numel.default: aten_sym_numel,
    torch.ops.aten.sym_stride.int: aten_sym_stride,
    torch.ops.aten.sym_storage_offset.default: aten_sym_storage_offset,
    # (the main graph's assertions are removed before translation; bodies keep theirs)
    torch.ops.aten._assert_scalar.default: runtime_assertion,
    torch.ops.aten.sym_constrain_range_for_size.default: runtime_assertion,
    torch.ops.aten._assert_tensor_metadata.default: runtime_assertion,
}


def symbolic_function(target: object) -> Callable[..., Any] | None:
    """Our function for ``target``, wrapped to give the dtype the graph expects, or None."""
    try:
        function = SYMBOLIC_FUNCTIONS.get(target)
    except TypeError:  # unhashable target
        return None
    if function is None:
        return None
    return _with_output_dtype(function)


def _with_output_dtype(function: Callable[..., Any]) -> Callable[..., Any]:
    def symbolic(*args: Any) -> Any:
        result = function(*args)
        dtypes = fx_output_dtypes()
        if dtypes and dtypes[0] is not None and isinstance(result, ir.Value):
            return _cast(result, dtypes[0])
        return result

    symbolic.__name__ = function.__name__
    return symbolic


def symbolic_dispatch(node: torch.fx.Node, registry: OnnxRegistry) -> Dispatch | None:
    """Our function for SymInt/SymFloat/SymBool arithmetic, unless the user registered one."""
    function = symbolic_function(node.target)
    name = target_name(node.target)
    if function is None or name in registry.custom_targets:
        return None
    entry = OnnxFunctionEntry(name, function)
    return Dispatch(name, entry, "onnx-export symbolic scalar function", False, tuple(node.args))
