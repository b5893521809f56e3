"""The adapter spec of an export: how the model's nested inputs and outputs map to ONNX's.

Built from the example inputs, the program's output structure and the ONNX graph's own
inputs and outputs (names, dtypes, symbolic shapes), without running the model again.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import onnx_ir as ir
import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from onnx_export._dtypes import to_torch_dtype
from onnx_export.adapters import AdapterSpec, AxisRange, build_adapter_spec
from onnx_export.adapters._paths import key_names
from onnx_export.adapters._unflatten import in_key_order
from onnx_export.capture._shape_fixes import StaticDim, user_dims
from onnx_export.capture._specialized import RangeGuard, guard_fails_at
from onnx_export.translation._translate import AXIS_RANGES_KEY, INT_RANGE_KEY, PYTHON_INT_KEY

__all__ = [
    "build_spec",
    "with_cast_from",
    "with_made_static",
    "with_axis_ranges",
    "size_one_candidates",
    "with_size_one_refused",
    "TORCH_RANGE",
    "guard_origin",
]

#: The origin of a range torch.export gave without a guard of the model's or a user's bound.
TORCH_RANGE = "torch.export's range for the captured program"

_REAL_TO_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _dims(value: ir.Value, is_complex: bool) -> tuple[int | str, ...]:
    shape = value.shape
    if shape is None:
        raise ValueError(f"The ONNX graph does not know the shape of {value.name!r}.")
    dims = tuple(d if isinstance(d, int) else str(d.value or "?") for d in shape.dims)
    return dims[:-1] if is_complex else dims


def _placeholder(value: ir.Value) -> torch.Tensor:
    """A tiny tensor with the output's rank and dtype (complex where the graph has a real view)."""
    is_complex = bool(value.meta.get("complex"))
    dtype = to_torch_dtype(value.dtype) if value.dtype is not None else torch.float32
    if is_complex:
        dtype = _REAL_TO_COMPLEX[dtype]
    return torch.empty([1] * len(_dims(value, is_complex)), dtype=dtype)


def _output_structure(program: ExportedProgram, user_outputs: Sequence[Any]) -> Any:
    leaves = [_placeholder(v) if isinstance(v, ir.Value) else v for v in user_outputs]
    return _unflatten_in_order(iter(leaves), program.call_spec.out_spec)


def _unflatten_in_order(leaves: Iterator[Any], spec: pytree.TreeSpec) -> Any:
    """``pytree.tree_unflatten``, with each mapping's keys in the order the spec names them.

    The adapter spec is built by flattening this value, so its leaves must come in the
    program's output order (a ``ModelOutput``'s ``unflatten_fn`` sorts keys by field).
    """
    if spec.is_leaf():
        return next(leaves)
    children = [_unflatten_in_order(leaves, child) for child in spec.children()]
    node = pytree.SUPPORTED_NODES[spec.type]
    value = node.unflatten_fn(children, spec.context)
    return in_key_order(value, key_names(spec.context, len(children)))


def with_made_static(spec: AdapterSpec, made_static: Sequence[StaticDim]) -> AdapterSpec:
    """``spec`` with the axes the export made static (asked dynamic) marked on their inputs.

    Inputs are matched by graph name, which is the dotted path (``extras.0``); an input
    renamed with ``input_names`` keeps the plain message.
    """
    if not made_static:
        return spec
    axes: dict[str, list[int]] = {}
    for dim in made_static:
        axes.setdefault(dim.input, []).append(dim.axis)
    leaves = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        found = axes.get(tensor.name) if tensor is not None else None
        if tensor is None or not found:
            leaves.append(leaf)
            continue
        marked = tuple(sorted({*tensor.made_static, *found}))
        tensor = dataclasses.replace(tensor, made_static=marked)
        leaves.append(dataclasses.replace(leaf, tensor=tensor))
    return dataclasses.replace(spec, inputs=tuple(leaves))


def with_cast_from(spec: AdapterSpec, dtype: object) -> AdapterSpec:
    """``spec`` whose ``dtype`` inputs (a half-precision export) take float32 too.

    The caller feeds what the float32 model took; the adapter casts it (and still refuses
    any other dtype). ``dtype`` ``None`` leaves the spec as it is.
    """
    if dtype is None:
        return spec
    leaves = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        if tensor is not None and tensor.dtype == dtype and not tensor.python_int:
            tensor = dataclasses.replace(tensor, cast_from=("float32",))
            leaves.append(dataclasses.replace(leaf, tensor=tensor))
        else:
            leaves.append(leaf)
    return dataclasses.replace(spec, inputs=tuple(leaves))


def build_spec(
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    program: ExportedProgram,
    model: ir.Model,
    user_outputs: Sequence[Any],
) -> AdapterSpec:
    """The adapter spec for ``model``, exported from ``program`` with these example inputs.

    Graph inputs fed from a Python int (marked dynamic) are matched to their leaf by path;
    the others are the tensor leaves, in order.
    """
    inputs = [v for v in model.graph.inputs if PYTHON_INT_KEY not in v.meta]
    int_inputs = {
        str(v.meta[PYTHON_INT_KEY]): str(v.name)
        for v in model.graph.inputs
        if PYTHON_INT_KEY in v.meta
    }
    outputs = [v for v in user_outputs if isinstance(v, ir.Value)]
    input_leaves = [
        leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)
    ]
    complex_inputs = [leaf.is_complex() for leaf in input_leaves]
    spec = build_adapter_spec(
        signature,
        args,
        kwargs,
        _output_structure(program, user_outputs),
        input_names=lambda index, _path: str(inputs[index].name),
        input_shapes={
            i: _dims(v, complex_inputs[i] if i < len(complex_inputs) else False)
            for i, v in enumerate(inputs)
        },
        output_names=[str(v.name) for v in outputs],
        output_shapes={i: _dims(v, bool(v.meta.get("complex"))) for i, v in enumerate(outputs)},
        int_inputs=int_inputs,
    )
    ranges = {
        str(v.name): v.meta[INT_RANGE_KEY] for v in model.graph.inputs if INT_RANGE_KEY in v.meta
    }
    return _with_int_ranges(spec, ranges)


def _with_int_ranges(
    spec: AdapterSpec, ranges: dict[str, tuple[int | None, int | None]]
) -> AdapterSpec:
    """``spec`` with each dynamic int's range (from the program), checked on each call."""
    if not ranges:
        return spec
    leaves = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        if tensor is None or not tensor.python_int or tensor.name not in ranges:
            leaves.append(leaf)
            continue
        low, high = ranges[tensor.name]
        tensor = dataclasses.replace(tensor, int_range=(low, high))
        leaves.append(dataclasses.replace(leaf, tensor=tensor))
    return dataclasses.replace(spec, inputs=tuple(leaves))


def _user_bounds(dim: Any) -> tuple[int | None, int | None]:
    """A ``Dim``'s own bounds (``None`` where the user gave none)."""
    low, high = getattr(dim, "min", None), getattr(dim, "max", None)
    low = low if isinstance(low, int) and low > 0 else None
    high = high if isinstance(high, int) and not isinstance(high, bool) else None
    return low, high


def _axis_range(
    axis: int,
    bounds: tuple[int | None, int | None],
    user: tuple[int | None, int | None],
    dim: Any,
    guard: RangeGuard | None,
) -> AxisRange | None:
    """The range the file keeps for one axis: torch's, less its default lower bound of 2.

    torch.export assumes sizes 0 and 1 away (``[2, inf)`` for an example of 2 or more)
    without anything in the model's code asking for it; that bound is dropped unless a
    guard or the user's ``Dim`` set it, so a batch of 1 still runs, as it always did.
    """
    low, high = bounds
    if low is not None and low <= 2 and guard is None and user[0] is None:
        low = None
    if low is None and high is None:
        return None
    if guard is not None:
        origin = guard_origin(guard)
    elif user != (None, None):
        origin = f"{dim!r} in dynamic_shapes"
    else:
        origin = TORCH_RANGE
    return AxisRange(axis, low, high, origin)


def narrowing_guard(symbol: str, low: int, candidates: Sequence[RangeGuard]) -> RangeGuard | None:
    """The guard of torch's code that fails at ``low - 1``: the one that raised the bound.

    Each candidate's expression has the other sizes at the example's values (``hinted``).
    """
    for guard in candidates:
        if (
            guard.symbol == symbol
            and guard.hinted
            and guard_fails_at(guard.hinted, symbol, low - 1)
        ):
            return guard
    return None


def guard_origin(guard: RangeGuard) -> str:
    """``the model's code at m.py:12 (if x.shape[0] > 2:)``: who set a range, for messages."""
    at = f" at {guard.location}" if guard.location else ""
    code = f" ({guard.code})" if guard.code else ""
    return f"the model's code{at}{code}"


def _left_to_conditions(
    symbol: str,
    bounds: tuple[int | None, int | None],
    guard: RangeGuard | None,
    narrowing: Sequence[RangeGuard],
    checked: Collection[str],
    user: tuple[int | None, int | None],
) -> tuple[int | None, int | None]:
    """The bounds torch gave, less those it derived from a comparison the file checks.

    ``total >= past + seq`` with the past and the new tokens traced as 2 or more gives
    ``total >= 4``; ``past + seq < 4095`` gives ``seq <= 4092``. The condition checks the
    sizes exactly (and the edge probe runs the small ones): the derived bound goes, unless
    it is the user's.
    """
    low, high = bounds
    if not checked:
        return low, high
    if guard is not None and guard.guard in checked and high is None and user[0] is None:
        low = None
    if high is not None and guard is None and user[1] is None:
        derived = any(
            g.symbol == symbol
            and g.guard in checked
            and g.hinted
            and guard_fails_at(g.hinted, symbol, high + 1)
            for g in narrowing
        )
        high = None if derived else high
    return low, high


def _conditions(
    axis: int,
    symbol: str,
    bounds: tuple[int | None, int | None],
    guards: Sequence[RangeGuard],
) -> list[tuple[AxisRange, RangeGuard]]:
    """The sizes of one axis the model's code left out: excluded sizes, a multiple, bounds.

    A comparison of the size with 1 (``size_one``) is not here: the export's edge probe
    runs size 1 first (:func:`size_one_candidates`, :func:`with_size_one_refused`).
    """
    low, high = bounds
    found: list[tuple[AxisRange, RangeGuard]] = []
    for guard in guards:
        if guard.symbol != symbol:
            continue
        if guard.kind == "interval":
            interval = _interval_bounds(guard)
            if interval is not None:
                found.append((AxisRange(axis, *interval, guard_origin(guard)), guard))
        elif guard.kind == "multiple":
            value = int(guard.guard.split(", ")[1].rstrip(")"))
            made = AxisRange(axis, None, None, guard_origin(guard), multiple_of=value)
            found.append((made, guard))
        elif guard.kind == "excluded":
            value = _excluded_value(guard.guard)
            inside = (low is None or value >= low) and (high is None or value <= high)
            if not inside:
                continue
            made = AxisRange(axis, None, None, guard_origin(guard), excluded=(value,))
            found.append((made, guard))
    return found


def _interval_bounds(guard: RangeGuard) -> tuple[int | None, int | None] | None:
    """``(low, high)`` of an interval guard's ``hinted`` text (``"3 <= s77 <= 39"``)."""
    parts = [p.strip() for p in guard.hinted.split("<=")]
    if len(parts) not in (2, 3) or not parts[0].isdigit():
        return None
    low = int(parts[0]) or None
    high = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else None
    return (low, high) if (low, high) != (None, None) else None


def size_one_candidates(
    model: ir.Model, guards: Sequence[RangeGuard], spec: AdapterSpec
) -> tuple[tuple[str, int, RangeGuard], ...]:
    """``(input, axis, guard)`` of each dynamic axis the model's code compared with 1.

    torch.export traced sizes of 2 or more, so the size-1 branch is not in the file; the
    export's edge probe runs size 1 and refuses it only where the file is wrong there
    (transformers compares sizes with 1 where both branches agree). Axes whose range
    already starts above 1 are left out.
    """
    by_symbol = {g.symbol: g for g in guards if g.kind == "size_one"}
    lowest = {
        (leaf.tensor.name, r.axis): r.low or 0
        for leaf in spec.inputs
        if leaf.tensor is not None
        for r in leaf.tensor.axis_ranges
        if r.low is not None
    }
    found = []
    for value in model.graph.inputs:
        for axis, symbol, *_ in value.meta.get(AXIS_RANGES_KEY, ()):
            guard = by_symbol.get(symbol)
            if guard is not None and lowest.get((str(value.name), axis), 0) < 2:
                found.append((str(value.name), axis, guard))
    return tuple(found)


def with_size_one_refused(
    spec: AdapterSpec, refused: Sequence[tuple[str, int, RangeGuard]]
) -> AdapterSpec:
    """``spec`` refusing size 1 on each ``(input, axis, guard)``, naming the guard's line."""
    leaves = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        extra = tuple(
            AxisRange(axis, None, None, guard_origin(guard), excluded=(1,))
            for name, axis, guard in refused
            if tensor is not None and name == tensor.name and isinstance(tensor.shape[axis], str)
        )
        if tensor is None or not extra:
            leaves.append(leaf)
            continue
        tensor = dataclasses.replace(tensor, axis_ranges=tensor.axis_ranges + extra)
        leaves.append(dataclasses.replace(leaf, tensor=tensor))
    return dataclasses.replace(spec, inputs=tuple(leaves))


def _excluded_value(guard: str) -> int:
    """``k`` of ``Ne(s77, k)`` (or ``Ne(k, s77)``)."""
    left, right = guard[len("Ne(") : -1].split(", ")
    return int(right if left.startswith("s") else left)


def with_axis_ranges(
    spec: AdapterSpec,
    model: ir.Model,
    names: Any,
    guards: Sequence[RangeGuard],
    checked: Collection[str] = (),
) -> tuple[AdapterSpec, list[tuple[str, str, RangeGuard]]]:
    """``spec`` with each bounded dynamic axis's range, checked by the adapter on each call.

    Returns the spec, and ``(input and axis, range, guard)`` for each range a guard in the
    model's code set (to warn about at that line).

    Args:
        spec: The adapter spec.
        model: The translated model; its tensor inputs carry their axes' symbols and ranges.
        names: The user's dynamic shapes keyed by input name (``DynamicShapes.names``), to
            tell the user's ``Dim`` bounds from guards.
        guards: The guards of the model's code that bounded a size, by torch symbol.
        checked: Texts of guards over several sizes the spec checks as conditions: a
            lower bound torch derived from one of them (``total >= past + seq`` with the
            past and the new tokens traced as 2 or more) is left to the condition.
    """
    by_symbol = {g.symbol: g for g in guards if g.kind == "bound"}
    narrowing = [g for g in guards if g.kind == "narrowing"]
    user = user_dims(names) if names is not None else {}
    found: dict[str, tuple[AxisRange, ...]] = {}
    guarded: list[tuple[str, str, RangeGuard]] = []
    for value in model.graph.inputs:
        ranges = []
        for axis, symbol, torch_low, torch_high in value.meta.get(AXIS_RANGES_KEY, ()):
            dim, guard = user.get((str(value.name), axis)), by_symbol.get(symbol)
            if guard is None and torch_low is not None and torch_low > 2:
                guard = narrowing_guard(symbol, torch_low, narrowing)  # torch's code raised it
            low, high = _left_to_conditions(
                symbol, (torch_low, torch_high), guard, narrowing, checked, _user_bounds(dim)
            )
            made = _axis_range(axis, (low, high), _user_bounds(dim), dim, guard)
            if made is not None:
                ranges.append(made)
                if guard is not None:
                    guarded.append((f"{value.name}[{axis}]", made.text(), guard))
            for condition in _conditions(axis, symbol, (low, high), guards):
                ranges.append(condition[0])
                guarded.append((f"{value.name}[{axis}]", condition[0].text(), condition[1]))
        if ranges:
            found[str(value.name)] = tuple(ranges)
    if not found:
        return spec, guarded
    leaves = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        if tensor is None or tensor.name not in found:
            leaves.append(leaf)
            continue
        symbolic = [r for r in found[tensor.name] if isinstance(tensor.shape[r.axis], str)]
        tensor = dataclasses.replace(tensor, axis_ranges=tuple(symbolic))
        leaves.append(dataclasses.replace(leaf, tensor=tensor))
    return dataclasses.replace(spec, inputs=tuple(leaves)), guarded
