"""A SymInt or SymFloat given to an ATen ``Scalar`` parameter: the Tensor overload's function.

``idx % (h * w)`` with dynamic ``h`` and ``w`` is ``aten.remainder.Scalar(idx, s0 * s1)``:
a ``Scalar`` parameter that holds a symbolic value, an INT64 (or FLOAT) 0-D tensor in the
ONNX graph. Torchlib's functions for many ``Scalar`` overloads (``remainder.Scalar``,
``pow.Tensor_Scalar``, ``bitwise_and.Scalar``, the shifts, ``add``/``sub``/``mul.Scalar``)
take that parameter as a Python number (an attribute, or ``ir.tensor(other)``), which a
value computed at run time cannot be.

Each such overload has a sibling whose parameter of the same name is a ``Tensor``
(``remainder.Tensor(self, other)``); a 0-D tensor there computes what the scalar would,
because torch promotes a 0-D tensor like a Python number of its kind (the symbolic value is
cast to the dtype torch computes in, see :mod:`._operands`). So the node is dispatched to
the sibling's functions. Functions that already take the value as an input (``eq.Scalar``,
``where.ScalarOther``, ``full``...) keep their node's overload.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx_ir as ir
import torch
import torch.fx

from onnx_export._registry import OnnxRegistry, target_name
from onnx_export.translation._dispatch import Dispatch, dispatch

__all__ = ["symbolic_scalar_dispatch", "tensor_sibling", "symbolic_scalar_positions"]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

#: Operators that are another's dunder spelling (torchlib registers the Tensor overload of
#: the named one only).
_SAME_OP = {
    "__lshift__": "bitwise_left_shift",
    "__rshift__": "bitwise_right_shift",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "__xor__": "bitwise_xor",
}


def _is_scalar_type(type_: Any) -> bool:
    if isinstance(type_, torch.OptionalType):
        type_ = type_.getElementType()
    return isinstance(type_, torch.NumberType)


def _is_tensor_type(type_: Any) -> bool:
    if isinstance(type_, torch.OptionalType):
        type_ = type_.getElementType()
    return isinstance(type_, torch.TensorType)


def _is_symbolic(arg: Any) -> bool:
    return isinstance(arg, torch.fx.Node) and isinstance(arg.meta.get("val"), _SYMBOLIC)


def symbolic_scalar_positions(node: torch.fx.Node) -> dict[str, int]:
    """The node's ``Scalar`` parameters that hold a symbolic value: name -> schema position."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    found: dict[str, int] = {}
    for i, formal in enumerate(schema.arguments):
        actual = node.args[i] if i < len(node.args) else node.kwargs.get(formal.name)
        if _is_scalar_type(formal.type) and _is_symbolic(actual):
            found[formal.name] = i
    return found


def tensor_sibling(
    target: torch._ops.OpOverload, positions: dict[str, int]
) -> torch._ops.OpOverload | None:
    """The overload of the same op whose parameters at ``positions`` are tensors, or None.

    Every other parameter must have the same name and type (``remainder.Scalar(self, other)``
    -> ``remainder.Tensor(self, other)``; ``add.Scalar(self, other, alpha)`` ->
    ``add.Tensor(self, other, *, alpha)``); the returns must agree.
    """
    schema = target._schema
    packet = target.overloadpacket
    wanted = set(positions.values())
    for overload_name in packet.overloads():
        other: torch._ops.OpOverload = getattr(packet, overload_name)
        theirs = other._schema
        if other is target or len(theirs.arguments) != len(schema.arguments):
            continue
        if [str(r.type) for r in theirs.returns] != [str(r.type) for r in schema.returns]:
            continue
        if all(
            mine.name == their.name
            and (
                str(mine.type) == str(their.type)
                or (i in wanted and _is_scalar_type(mine.type) and _is_tensor_type(their.type))
            )
            for i, (mine, their) in enumerate(zip(schema.arguments, theirs.arguments, strict=True))
        ):
            return other
    return None


def _takes_as_constant(decision: Dispatch) -> bool:
    """Whether the chosen function takes a symbolic argument as a constant (an attribute)."""
    entry = decision.entry
    if entry is None:
        return True
    if entry.signature is None:
        return False  # a plain Python function (ours): it computes with what it gets
    return any(
        isinstance(param, ir.schemas.AttributeParameter) and _is_symbolic(arg)
        for param, arg in zip(entry.signature.params, decision.args, strict=False)
    )


def symbolic_scalar_dispatch(node: torch.fx.Node, registry: OnnxRegistry) -> Dispatch | None:
    """The Tensor overload's function for a symbolic scalar in a ``Scalar`` parameter.

    None when the node has no such parameter, when the user registered a function for
    the node's own op, or when the node's function takes the value as an input already.
    """
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None
    positions = symbolic_scalar_positions(node)
    name = target_name(target)
    if not positions or name in registry.custom_targets:
        return None
    own = dispatch(node, registry)
    if not _takes_as_constant(own):
        return None
    sibling = tensor_sibling(target, positions)
    if sibling is None:
        return None
    decision = dispatch(node, registry, target=sibling)
    alias = _SAME_OP.get(target.overloadpacket.__name__)
    if decision.entry is None and alias is not None:
        sibling = getattr(getattr(torch.ops.aten, alias), sibling._overloadname)
        decision = dispatch(node, registry, target=sibling)
    if decision.entry is None:
        return None
    scalars = ", ".join(sorted(positions))
    reason = (
        f"{decision.reason}; the symbolic {scalars} given to {name} taken as a 0-D tensor "
        f"by {target_name(sibling)}'s function"
    )
    return dataclasses.replace(decision, target=name, reason=reason)
