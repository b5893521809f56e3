"""Choose the ONNX function for one FX node among a target's overloads.

Dispatch never raises: it returns a :class:`Dispatch` that carries the chosen function
(or ``None``) and the reason, so that every unsupported node can be collected and
reported together.

Dispatch is dtype-aware: torch promotes mixed dtypes implicitly (``float / int64``,
``sum`` of bools), ONNX does not. For elementwise ops with promotion rules and for
sum-like reductions, the chosen function is wrapped so that tensor inputs are cast to
the dtype torch computes in (see :func:`promotion_casts`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import keyword
import typing
from typing import Any

import onnx_ir as ir
import torch.fx
from onnxscript.ir._schemas import op_signature_from_function
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from onnx_export._dtypes import is_complex_value, to_ir_dtype, value_dtype
from onnx_export._registry import OnnxFunctionEntry, OnnxRegistry, target_name

__all__ = ["Dispatch", "PromotionFailed", "dispatch", "bind_arguments", "promotion_casts"]


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """The outcome of dispatching one node.

    Attributes:
        target: The node's operator name.
        entry: The chosen function, or ``None`` when the op is unsupported.
        reason: Why this function (or why none).
        fallback: True when no overload matched the node's types and the first was
            taken anyway.
        args: Positional arguments for the function (FX nodes still unconverted).
    """

    target: str
    entry: OnnxFunctionEntry | None
    reason: str
    fallback: bool = False
    args: tuple[Any, ...] = ()


def _python_name(name: str) -> str:
    """ATen argument names that are Python keywords (``from``) end in ``_`` in Python."""
    return f"{name}_" if keyword.iskeyword(name) else name


def _aten_named_arguments(node: torch.fx.Node) -> dict[str, Any] | None:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return None
    named: dict[str, Any] = {}
    for formal, actual in zip(schema.arguments, node.args, strict=False):
        named[_python_name(formal.name)] = actual
    named.update({_python_name(k): v for k, v in node.kwargs.items()})
    return named


@functools.cache
def _python_signature(function: Any) -> inspect.Signature | None:
    python_function = getattr(function, "func", None) or getattr(function, "function", None)
    try:
        return inspect.signature(python_function or function)
    except (TypeError, ValueError):
        return None


def bind_arguments(
    node: torch.fx.Node, function: Any, signature: ir.schemas.OpSignature | None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Map the node's arguments onto the function's parameters, as positional arguments.

    By name (ATen schema names match torchlib's parameter names) when every required
    parameter is found that way; otherwise positionally. Arguments the function does
    not take are dropped; gaps before a given argument take the function's defaults.
    Returns the positional arguments and, for type checks, the arguments by name.
    """
    python_signature = _python_signature(function)
    if signature is not None:
        names = [p.name for p in signature.params]
        required = [p.name for p in signature.params if p.required]
    elif python_signature is not None:
        formal = [
            p
            for p in python_signature.parameters.values()
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        names = [p.name for p in formal]
        required = [p.name for p in formal if p.default is inspect.Parameter.empty]
    else:
        return tuple(node.args), dict(node.kwargs)
    named = _aten_named_arguments(node)
    if named is None or not all(n in named for n in required):
        named = dict(zip(names, node.args, strict=False)) | dict(node.kwargs)
    named = {k: v for k, v in named.items() if k in names}
    if python_signature is None:
        return tuple(named[n] for n in names if n in named), named
    bound = python_signature.bind_partial(**named)
    last = max((names.index(k) for k in named), default=-1)
    positional = []
    for name in names[: last + 1]:
        if name in bound.arguments:
            positional.append(bound.arguments[name])
        else:
            positional.append(python_signature.parameters[name].default)
    return tuple(positional), named


#: What each attribute type takes, as the FX argument comes: the translator passes a
#: ``torch.dtype`` as its ONNX data type number, a device, layout or memory format as text.
_AS_STRING = (str, torch.device, torch.layout, torch.memory_format)
_ATTR_ACCEPTS: dict[ir.AttributeType, tuple[type, ...]] = {
    ir.AttributeType.INT: (int, bool, torch.dtype),
    ir.AttributeType.FLOAT: (float, int),
    ir.AttributeType.STRING: _AS_STRING,
    ir.AttributeType.INTS: (int, bool, torch.dtype),
    ir.AttributeType.FLOATS: (float, int),
    ir.AttributeType.STRINGS: _AS_STRING,
}


def _attribute_fits(param: ir.schemas.AttributeParameter, value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, torch.fx.Node):
        return False
    accepted = _ATTR_ACCEPTS.get(param.type)
    if accepted is None:
        return True
    if param.type in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS):
        items = value if isinstance(value, (list, tuple)) else [value]
        return all(isinstance(v, accepted) for v in items)
    return isinstance(value, accepted) and not isinstance(value, (list, tuple))


def _input_fits(param: ir.schemas.Parameter, value: Any) -> bool:
    if not isinstance(value, torch.fx.Node):
        return True  # Python scalars and lists are promoted to constants
    dtype = value_dtype(value.meta.get("val"))
    allowed = param.type_constraint.allowed_types
    if dtype is None or not allowed:
        return True
    if param.variadic:
        return True
    return ir.TensorType(dtype) in allowed or any(isinstance(t, ir.SequenceType) for t in allowed)


@functools.cache
def _annotated_inputs(function: Any) -> tuple[ir.schemas.Parameter, ...]:
    """The tensor inputs a plain Python function's annotations constrain (``x: BOOL``).

    onnxscript functions carry an ``op_signature``; a plain function registered by the
    user (``def f(self: FLOAT, other: FLOAT)``) has only its annotations, and two such
    overloads of one op are told apart by them, as torch.onnx's dispatcher does.
    Parameters without an annotation, and attributes, are not checked.
    """
    python_function = getattr(function, "func", None) or getattr(function, "function", None)
    python_function = python_function or function
    try:
        hints = typing.get_type_hints(python_function)
        signature = op_signature_from_function(python_function, "user")
    except Exception:  # unresolvable annotations, builtins: nothing to check
        return ()
    return tuple(
        p for p in signature.params if isinstance(p, ir.schemas.Parameter) and p.name in hints
    )


def _annotation_mismatch(entry: OnnxFunctionEntry, bound: dict[str, Any]) -> str:
    for param in _annotated_inputs(entry.function):
        if param.name in bound and not _input_fits(param, bound[param.name]):
            dtype = value_dtype(bound[param.name].meta.get("val"))
            return f"input {param.name!r} is annotated for other types than {dtype}"
    return ""


def _mismatch(entry: OnnxFunctionEntry, bound: dict[str, Any]) -> str:
    signature = entry.signature
    if signature is None:
        return _annotation_mismatch(entry, bound)
    for param in signature.params:
        if param.name not in bound:
            if param.required and not getattr(param, "variadic", False):
                return f"required parameter {param.name!r} has no argument"
            continue
        value = bound[param.name]
        if isinstance(param, ir.schemas.AttributeParameter):
            if not _attribute_fits(param, value):
                return f"attribute {param.name!r} cannot take {type(value).__name__}"
        elif not _input_fits(param, value):
            dtype = value_dtype(value.meta.get("val"))
            return f"input {param.name!r} does not accept {dtype}"
    return ""


def _node_is_complex(node: torch.fx.Node) -> bool:
    # By inputs: ops that make complex values from real ones (rfft, view_as_complex) have
    # ordinary functions that return the real view.
    return any(is_complex_value(arg.meta.get("val")) for arg in node.all_input_nodes)


def dispatch(node: torch.fx.Node, registry: OnnxRegistry, target: object = None) -> Dispatch:
    """Pick the function for ``node``: the first whose types fit.

    The user's functions, when any is registered for the op, are the only candidates:
    among them the first whose types (``op_signature``, or a plain function's
    annotations) fit; if none fits, the first, with a fallback warning, rather than
    silently ours or torchlib's. Otherwise ours, then torchlib's. ``target`` (default: the
    node's) picks among another overload's functions whose arguments have the same names
    (``remainder.Tensor``'s for a ``remainder.Scalar`` node).

    Example:
        The result names the function and why, or says why there is none::

            decision = dispatch(node, registry)
            if decision.entry is None:
                print(decision.reason)
    """
    target = node.target if target is None else target
    name = target_name(target)
    entries = registry.get(target)
    if not entries:
        return Dispatch(name, None, f"no ONNX function is registered for {name}")
    complex_node = _node_is_complex(node)
    candidates = [e for e in entries if e.is_complex == complex_node or e.is_custom]
    if not candidates:
        kind = "complex" if complex_node else "real"
        return Dispatch(name, None, f"{name} has ONNX functions, but none for {kind} inputs")
    custom = [e for e in candidates if e.is_custom]
    candidates = custom or candidates
    reasons = []
    for entry in candidates:
        args, named = bind_arguments(node, entry.function, entry.signature)
        why_not = _mismatch(entry, named)
        if not why_not:
            return _promoted(
                Dispatch(name, entry, f"{entry.origin} function whose types fit", False, args), node
            )
        reasons.append(f"{entry.name}: {why_not}")
    first = candidates[0]
    args, _ = bind_arguments(node, first.function, first.signature)
    reason = "no overload matched exactly (" + "; ".join(reasons) + f"); using {first.name}"
    return _promoted(Dispatch(name, first, reason, True, args), node)


# -- type promotion --------------------------------------------------------------------

_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND

#: Elementwise ops (by ``OpOverloadPacket`` name) and how torch promotes their inputs.
_ELEMENTWISE: dict[str, ELEMENTWISE_TYPE_PROMOTION_KIND] = {
    **dict.fromkeys(
        ["add", "sub", "subtract", "rsub", "mul", "multiply", "floor_divide", "remainder",
         "fmod", "maximum", "minimum", "fmax", "fmin", "where", "lerp", "clamp", "clip",
         "addcmul", "bitwise_and", "bitwise_or", "bitwise_xor", "hypot", "nextafter",
         "heaviside", "logaddexp", "logaddexp2", "__and__", "__or__", "__xor__"],
        _KIND.DEFAULT,
    ),
    **dict.fromkeys(
        ["div", "divide", "true_divide", "atan2", "copysign", "xlogy", "addcdiv",
         "special_xlog1py", "special_zeta", "igamma", "igammac"],
        _KIND.INT_TO_FLOAT,
    ),
    **dict.fromkeys(
        ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
         "isclose"],
        _KIND.ALWAYS_BOOL,
    ),
    "pow": _KIND.BOOL_TO_LONG,
}  # fmt: skip

#: Ops whose leading arguments take no part in promotion (``where``'s condition).
_FIRST_PROMOTED = {"where": 1}

#: Reductions and scans that accumulate bools and small integers in int64 (or a dtype=).
_ACCUMULATING = {"sum", "nansum", "prod", "cumsum", "mean"}

#: Ops that join a list of tensors (their first argument) into one of the promoted dtype:
#: ``cat([int64, float32])`` (an empty one included) is float32.
_JOINING = {
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack",
    "row_stack", "block_diag", "cartesian_prod",
}  # fmt: skip


def _packet(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(getattr(target, "overloadpacket", None), "__name__", "")
    return str(name)


def _rounds(node: torch.fx.Node) -> bool:
    """Whether a division node rounds (``rounding_mode`` "trunc" or "floor")."""
    mode = node.kwargs.get("rounding_mode")
    if mode is None and len(node.args) > 2:
        mode = node.args[2]
    return isinstance(mode, str)


def _promotable(value: Any) -> Any:
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
    if isinstance(val, torch.Tensor) and not val.is_complex():
        return val
    if isinstance(val, (bool, int, float)) and not isinstance(value, torch.fx.Node):
        return val
    return None


def _int_to_float_pointwise(node: torch.fx.Node) -> bool:
    """A pointwise op (torch's ``pointwise`` tag) that gives a float for integer inputs.

    torch computes ``exp``, ``sin``, ``sqrt``, ``sigmoid``, ``erf``... of integers and
    bools in floating point; ONNX's ops take floats only, so those inputs are cast to
    the output's dtype first (only when no input is floating: ``masked_fill``'s mask or
    ``ldexp``'s exponent stay as they are).
    """
    tags = getattr(node.target, "tags", ())
    out = node.meta.get("val")
    return (
        torch.Tag.pointwise in tags
        and isinstance(out, torch.Tensor)
        and out.dtype.is_floating_point
    )


def _integer_inputs_to(dtype: torch.dtype, args: tuple[Any, ...]) -> dict[int, ir.DataType]:
    """Every tensor input to ``dtype``, when none is floating (else: a mask or an index)."""
    tensors = [
        val
        for arg in args
        if isinstance(arg, torch.fx.Node) and isinstance(val := arg.meta.get("val"), torch.Tensor)
    ]
    if any(t.dtype.is_floating_point or t.is_complex() for t in tensors):
        return {}
    return {
        i: to_ir_dtype(dtype)
        for i, arg in enumerate(args)
        if isinstance(arg, torch.fx.Node)
        and isinstance(val := arg.meta.get("val"), torch.Tensor)
        and not val.is_complex()
        and not val.dtype.is_floating_point
    }


class PromotionFailed(Exception):
    """torch's own type promotion raised for a node's inputs (they are passed as they are)."""


def _elementwise_target(node: torch.fx.Node, packet: str, args: tuple[Any, ...]) -> Any:
    """The dtype torch promotes an elementwise op's inputs to (None: nothing to do).

    Raises:
        PromotionFailed: When torch's ``elementwise_dtypes`` rejects the inputs.
    """
    values = [v for v in (_promotable(a) for a in args) if v is not None]
    if not any(isinstance(v, torch.Tensor) for v in values):
        return None
    kind = _ELEMENTWISE[packet]
    if _rounds(node):  # div(..., rounding_mode=...) stays integral
        kind = _KIND.DEFAULT
    if kind in (_KIND.ALWAYS_BOOL, _KIND.BOOL_TO_LONG):
        kind = _KIND.DEFAULT
    try:
        return elementwise_dtypes(*values, type_promotion_kind=kind)[1]
    except (TypeError, ValueError, RuntimeError) as e:
        raise PromotionFailed(f"{type(e).__name__}: {e}") from e


def promotion_casts(node: torch.fx.Node, args: tuple[Any, ...]) -> dict[int, ir.DataType]:
    """Positions of ``args`` (FX nodes) to cast, and to which dtype, as torch promotes them.

    Elementwise ops: every tensor input goes to the promoted dtype of all inputs (Python
    scalars included), floating for int-to-float ops. Other pointwise ops with a float
    output: integer and bool inputs go to the output's dtype. Sum-like reductions: the
    input goes to the output's dtype. Joining ops (``cat``, ``stack``...): every tensor of
    the list at position 0 goes to the output's dtype. Empty when the dtypes already agree.

    Raises:
        PromotionFailed: When torch's type promotion rejects the inputs.
    """
    packet = _packet(node)
    target: torch.dtype | None = None
    first = _FIRST_PROMOTED.get(packet, 0)
    if packet in _JOINING:
        return _joined_casts(node, args)
    if packet in _ELEMENTWISE:
        target = _elementwise_target(node, packet, args[first:])
    elif _int_to_float_pointwise(node):
        return _integer_inputs_to(node.meta["val"].dtype, args)
    elif packet in _ACCUMULATING:
        out = node.meta.get("val")
        target = out.dtype if isinstance(out, torch.Tensor) and not out.is_complex() else None
        if target is None or target == torch.bool:
            return {}
    if target is None:
        return {}
    casts: dict[int, ir.DataType] = {}
    for i, arg in enumerate(args):
        if i < first or not isinstance(arg, torch.fx.Node):
            continue
        val = arg.meta.get("val")
        if isinstance(val, torch.Tensor) and not val.is_complex() and val.dtype != target:
            if packet in _ACCUMULATING and i > 0:
                continue  # only the accumulated input
            casts[i] = to_ir_dtype(target)
    return casts


def _joined_casts(node: torch.fx.Node, args: tuple[Any, ...]) -> dict[int, ir.DataType]:
    """The tensor list of a joining op to the output's dtype, when any tensor differs.

    The cast applies to every tensor of the list (``_with_casts`` casts list items).
    """
    out = node.meta.get("val")
    tensors = args[0] if args and isinstance(args[0], (list, tuple)) else ()
    if not isinstance(out, torch.Tensor) or out.is_complex():
        return {}
    for item in tensors:
        val = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and not val.is_complex() and val.dtype != out.dtype:
            return {0: to_ir_dtype(out.dtype)}
    return {}


_REAL_OF = {torch.complex64: ir.DataType.FLOAT, torch.complex128: ir.DataType.DOUBLE}


def _real_scalar_inputs(entry: OnnxFunctionEntry, args: tuple[Any, ...]) -> list[int]:
    """Positions where a complex function's complex input gets a real Python number.

    Only inputs typed like the first (the complex tensor's constraint): ``slice``'s INT64
    ``start`` stays an integer.
    """
    signature = entry.signature
    if signature is None or not entry.is_complex or not signature.params:
        return []
    first = signature.params[0]
    if not isinstance(first, ir.schemas.Parameter):
        return []
    return [
        i
        for i, (param, arg) in enumerate(zip(signature.params, args, strict=False))
        if isinstance(param, ir.schemas.Parameter)
        and param.type_constraint.name == first.type_constraint.name
        and isinstance(arg, (int, float))
        and not isinstance(arg, bool)
    ]


def _with_complex_scalars(decision: Dispatch, node: torch.fx.Node) -> Dispatch:
    """A complex function's real Python operands (``z * 2``) as complex real views ``[v, 0]``.

    Torchlib's complex functions take the real view (trailing axis of 2) for every tensor
    input; a bare ``2`` there would be sliced as if it were one.
    """
    entry = decision.entry
    positions = _real_scalar_inputs(entry, decision.args) if entry is not None else []
    if entry is None or not positions:
        return decision
    out = node.meta.get("val")
    real = _REAL_OF.get(out.dtype, ir.DataType.FLOAT) if isinstance(out, torch.Tensor) else None
    real = real or ir.DataType.FLOAT
    function = entry.function

    def complex_operands(*args: Any) -> Any:
        import numpy as np

        from onnx_export.ops._common import op

        values = list(args)
        for i in positions:
            pair = np.array([values[i], 0], dtype=real.numpy())
            values[i] = op.Constant(value=ir.tensor(pair))
        return function(*values)

    complex_operands.__name__ = entry.name
    complex_operands.op_signature = getattr(function, "op_signature", None)  # type: ignore[attr-defined]
    return dataclasses.replace(
        decision,
        entry=dataclasses.replace(entry, function=complex_operands),
        reason=f"{decision.reason}; real scalars as complex values (args {positions})",
    )


def _promoted(decision: Dispatch, node: torch.fx.Node) -> Dispatch:
    decision = _with_complex_scalars(decision, node)
    entry = decision.entry
    if entry is None or entry.is_custom:
        return decision
    try:
        casts = promotion_casts(node, decision.args)
    except PromotionFailed as e:
        return dataclasses.replace(
            decision,
            reason=f"{decision.reason}; type promotion failed ({e}), inputs passed unconverted",
        )
    if not casts:
        return decision
    function = _with_casts(entry.function, casts, entry.name)
    targets = ", ".join(f"arg {i} to {d.name}" for i, d in sorted(casts.items()))
    return dataclasses.replace(
        decision,
        entry=dataclasses.replace(entry, function=function),
        reason=f"{decision.reason}; inputs promoted as torch does ({targets})",
    )


def _with_casts(function: Any, casts: dict[int, ir.DataType], name: str) -> Any:
    from onnxscript import opset18

    cast: Any = opset18.Cast  # typed for onnxscript's tensors; records ir.Values here

    def to(value: Any, dtype: ir.DataType) -> Any:
        if isinstance(value, ir.Value) and value.dtype != dtype:
            return cast(value, to=int(dtype))
        return value

    def promoted(*args: Any) -> Any:
        converted = list(args)
        for i, dtype in casts.items():
            value = converted[i]
            if isinstance(value, (list, tuple)):  # a joining op's tensors: each of them
                converted[i] = [to(item, dtype) for item in value]
            else:
                converted[i] = to(value, dtype)
        return function(*converted)

    promoted.__name__ = name
    promoted.op_signature = getattr(function, "op_signature", None)  # type: ignore[attr-defined]
    return promoted
