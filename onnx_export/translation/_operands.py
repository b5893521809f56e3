"""Operands ONNX functions cannot take as they come: complex scalars, symbolic scalars.

- A Python ``complex`` (``x * (2 + 3j)``) becomes its real view, a constant ``[re, im]``
  in the real dtype of the node's complex tensors, as complex tensors are everywhere in
  the graph (trailing axis of 2; it broadcasts against ``[..., 2]``).
- A SymInt/SymFloat/SymBool (an INT64/FLOAT/BOOL scalar in the graph) given to a pointwise
  op beside tensors (``x * x.shape[0]``) is cast to the dtype torch computes in, as torch
  treats it like a Python number of its kind; an integer tensor mixed with a SymFloat is
  cast too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
import torch.fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from onnx_export._dtypes import is_complex_value, to_ir_dtype
from onnx_export._registry import OnnxRegistry, target_name
from onnx_export.ops._common import op
from onnx_export.translation._builder import recorded
from onnx_export.translation._dispatch import Dispatch, bind_arguments

__all__ = ["operand_values", "complex_scalar_dispatch"]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
_STAND_IN: dict[type, object] = {torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}
#: Ops that compute integers in floating point (``xlogy(SymInt, int_tensor)`` is a float).
_INT_TO_FLOAT = {
    "div", "divide", "true_divide", "atan2", "copysign", "xlogy", "special_xlog1py",
    "special_zeta", "igamma", "igammac",
}  # fmt: skip
#: Ops whose integer tensor inputs follow a SymFloat operand to floating point.
_ARITHMETIC = {
    "add", "sub", "rsub", "mul", "div", "divide", "true_divide", "pow", "remainder",
    "floor_divide", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
}  # fmt: skip
_REAL = {torch.complex64: np.float32, torch.complex128: np.float64, torch.complex32: np.float16}


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _complex_real_dtype(node: torch.fx.Node) -> type:
    vals = [_val(a) for a in node.all_input_nodes] + [node.meta.get("val")]
    for val in vals:
        if isinstance(val, torch.Tensor) and val.is_complex():
            return _REAL[val.dtype]
    return np.float32


def _complex_constant(value: complex, dtype: type) -> Any:
    return op.Constant(value=ir.tensor(np.array([value.real, value.imag], dtype=dtype)))


def _compute_dtype(node: torch.fx.Node, fx_args: Sequence[Any]) -> torch.dtype | None:
    stand_ins: list[Any] = []
    for arg in fx_args[1:] if _packet(node) == "where" else fx_args:  # not the condition
        val = _val(arg)
        if isinstance(val, _SYMBOLIC):
            stand_ins.append(_STAND_IN[type(val)])
        elif isinstance(val, (torch.Tensor, bool, int, float)):
            stand_ins.append(val)
    if not any(isinstance(v, torch.Tensor) for v in stand_ins):
        return None
    packet = getattr(getattr(node.target, "overloadpacket", None), "__name__", "")
    kind = (
        ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
        if packet in _INT_TO_FLOAT and "rounding_mode" not in node.kwargs
        else ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
    )
    try:
        return elementwise_dtypes(*stand_ins, type_promotion_kind=kind)[0]
    except (TypeError, ValueError, RuntimeError):
        return None


def _cast_symbolic(node: torch.fx.Node, fx_args: Sequence[Any], values: list[Any]) -> list[Any]:
    pointwise = torch.Tag.pointwise in getattr(node.target, "tags", ())
    if not pointwise and _packet(node) not in _ARITHMETIC | {"where"}:  # floor_divide: no tag
        return values
    compute = _compute_dtype(node, fx_args)
    if compute is None or compute.is_complex:
        return values
    dtype = to_ir_dtype(compute)
    packet = getattr(getattr(node.target, "overloadpacket", None), "__name__", "")
    for i, (arg, value) in enumerate(zip(fx_args, values, strict=True)):
        val = _val(arg)
        symbolic = isinstance(val, _SYMBOLIC)
        tensor = packet in _ARITHMETIC and isinstance(val, torch.Tensor) and not val.is_complex()
        if (symbolic or tensor) and isinstance(value, ir.Value) and value.dtype != dtype:
            values[i] = op.Cast(value, to=int(dtype))
    return values


def operand_values(node: torch.fx.Node, fx_args: Sequence[Any], values: Sequence[Any]) -> list[Any]:
    """``values`` (the converted ``fx_args`` of ``node``) as its ONNX function takes them.

    Must be called while recording (it may add ``Constant`` and ``Cast`` nodes). Values
    become :class:`~onnx_export.translation._builder.RecordedValue` (the same objects), so
    the function may compare and compute with them as torchlib's code does.
    """
    result: list[Any] = list(values)
    recorded(result)
    if any(isinstance(v, complex) for v in result):
        real = _complex_real_dtype(node)
        result = [_complex_constant(v, real) if isinstance(v, complex) else v for v in result]
    if any(isinstance(_val(a), _SYMBOLIC) for a in fx_args):
        result = _cast_symbolic(node, fx_args, result)
        result = _scalars_to_floating_result(node, fx_args, result)
    if _packet(node) in _BITWISE:
        result = _cast_to_result_dtype(node, result)
    return result


def _scalar_parameter_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The symbolic FX nodes the node gives to ATen ``Scalar`` parameters."""
    schema = getattr(node.target, "_schema", None)
    found: list[torch.fx.Node] = []
    for i, formal in enumerate(schema.arguments if schema is not None else ()):
        actual = node.args[i] if i < len(node.args) else node.kwargs.get(formal.name)
        type_ = formal.type
        if isinstance(type_, torch.OptionalType):
            type_ = type_.getElementType()
        if not isinstance(actual, torch.fx.Node) or not isinstance(type_, torch.NumberType):
            continue
        if isinstance(_val(actual), _SYMBOLIC):
            found.append(actual)
    return found


def _scalars_to_floating_result(
    node: torch.fx.Node, fx_args: Sequence[Any], values: list[Any]
) -> list[Any]:
    """Symbolic ``Scalar`` arguments of a non-pointwise op with a floating result, in its dtype.

    torch computes a Scalar in the op's dtype (``hardtanh_backward(g, x, s0, s1)`` clamps
    a float tensor by the sizes); pointwise ops are cast by :func:`_cast_symbolic` already.
    """
    out = node.meta.get("val")
    if torch.Tag.pointwise in getattr(node.target, "tags", ()):
        return values
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        return values
    scalars = _scalar_parameter_nodes(node)
    dtype = to_ir_dtype(out.dtype)
    for i, (arg, value) in enumerate(zip(fx_args, values, strict=True)):
        if any(arg is s for s in scalars) and isinstance(value, ir.Value) and value.dtype != dtype:
            values[i] = op.Cast(value, to=int(dtype))
    return values


#: Ops whose torchlib function takes operands of one dtype, picked by the first: torch
#: promotes ``int32 | bool`` to int32, ONNX's ``BitwiseOr`` refuses a bool operand.
_BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "__and__", "__or__", "__xor__"}


def _packet(node: torch.fx.Node) -> str:
    return str(getattr(getattr(node.target, "overloadpacket", None), "__name__", ""))


def _cast_to_result_dtype(node: torch.fx.Node, values: list[Any]) -> list[Any]:
    """Tensor operands of another dtype than ``node``'s result, cast to it (torch's promotion).

    CPM-Ant's attention mask, ``context[:, None, :] | (mask & causal)`` with an int
    ``context``: the bool operand went to ``BitwiseOr`` as it was, a file ONNX Runtime
    refused ("Type 'tensor(bool)' of input parameter ... of operator (BitwiseOr) is
    invalid").
    """
    result_val = node.meta.get("val")
    if not isinstance(result_val, torch.Tensor):
        return values
    dtype = to_ir_dtype(result_val.dtype)
    return [
        op.Cast(v, to=int(dtype)) if isinstance(v, ir.Value) and v.dtype not in (None, dtype) else v
        for v in values
    ]


# -- a complex scalar that makes a real node complex -----------------------------------


def _has_complex_scalar(node: torch.fx.Node) -> bool:
    def walk(value: Any) -> bool:
        if isinstance(value, complex):
            return True
        if isinstance(value, (list, tuple)):
            return any(walk(v) for v in value)
        return False

    return walk(list(node.args)) or walk(list(node.kwargs.values()))


def _as_complex_view(function: Any, positions: Sequence[int]) -> Any:
    """``function`` with the real tensors at ``positions`` turned into complex real views."""

    def complex_inputs(*args: Any) -> Any:
        values = list(args)
        for i in positions:
            value = values[i]
            if isinstance(value, ir.Value):
                real = op.Unsqueeze(value, op.Constant(value_ints=[-1]))
                values[i] = op.Concat(real, op.Mul(real, op.CastLike(0, real)), axis=-1)
        return function(*values)

    complex_inputs.__name__ = getattr(function, "__name__", "complex_function")
    complex_inputs.op_signature = getattr(function, "op_signature", None)  # type: ignore[attr-defined]
    return complex_inputs


def complex_scalar_dispatch(node: torch.fx.Node, registry: OnnxRegistry) -> Dispatch | None:
    """The complex function for a node whose only complex operand is a Python scalar.

    ``x * 2j`` on a real ``x`` and ``torch.full(size, 1 + 1j)`` give complex tensors from
    real (or no) tensor inputs; dispatch, which goes by input tensors, would take the real
    function. The complex one is taken instead, with real tensor inputs given as complex
    real views (imaginary part 0). None when the node is not such a node.
    """
    if not is_complex_value(node.meta.get("val")) or not _has_complex_scalar(node):
        return None
    if any(is_complex_value(arg.meta.get("val")) for arg in node.all_input_nodes):
        return None
    name = target_name(node.target)
    entries = [e for e in registry.get(node.target) if e.is_complex]
    if not entries:
        return Dispatch(name, None, f"{name} has no ONNX function for complex values")
    entry = entries[0]
    args, _ = bind_arguments(node, entry.function, entry.signature)
    positions = [
        i
        for i, arg in enumerate(args)
        if isinstance(val := _val(arg), torch.Tensor)
        and val.is_floating_point()
        and isinstance(arg, torch.fx.Node)
    ]
    function = _as_complex_view(entry.function, positions)
    entry = dataclasses.replace(entry, function=function)
    reason = "complex function: a complex Python scalar makes the result complex"
    return Dispatch(name, entry, reason, False, args)
