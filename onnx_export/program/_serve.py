"""Serve every dynamic axis a file declares, or refuse it: the export's last capture step.

:mod:`._served_axes` holds the checks (nodes that hold the example's sizes, a run at a
second size); this module decides what follows from them: keep the program, capture
again at other example sizes (and prove that capture at a third size), report, or refuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from onnx_export.adapters import AdapterSpec, AxisRange
from onnx_export.capture._call import Call
from onnx_export.capture._resize import Kept, Resized, resized_call
from onnx_export.capture._specialized import RangeGuard
from onnx_export.diagnostics import DiagnosticContext
from onnx_export.program._conditions import condition_axes
from onnx_export.program._parity import skip_reason
from onnx_export.program._program import ONNXProgram
from onnx_export.program._serialize import initializer_bytes
from onnx_export.program._served_axes import (
    CHEAP_BYTES,
    HeldSize,
    capped,
    capped_range,
    declared_multiples,
    declared_ranges,
    example_sizes,
    held_example_sizes,
    narrowed,
    narrowed_range,
    right_at_example,
    second_size_problem,
    unserved_axes_error,
)
from onnx_export.reporting import _records as _report

__all__ = ["serve_dynamic_axes"]

Built = TypeVar("Built")


def serve_dynamic_axes(
    built: Built,
    program_of: Callable[[Built], ONNXProgram],
    call: Call,
    recapture: Callable[[Call], Built | None],
    context: DiagnosticContext,
    on_pinned: Callable[[Built, Sequence[tuple[str, str, RangeGuard]]], None] | None = None,
) -> Built:
    """``built`` if it serves every dynamic axis it declares; else a capture that does.

    Args:
        built: The export's result so far.
        program_of: Its ``ONNXProgram``.
        call: The user's call (the example), with its dynamic shapes.
        recapture: Captures and builds at another call (other example sizes), or ``None``
            when that capture fails or loses a dynamic dimension.
        context: The export's diagnostics.
        on_pinned: Told of the axes ``built``'s file now holds at the example's size only
            (``(input and axis, range, why)``, warned like a guard's range): a file off
            at another size inside torch's narrowed range, where no capture at other
            sizes is right at the example.

    Where the model is small, the file runs at the example and at
    other sizes against eager PyTorch; a file right at the example but not at the others
    (or one torch bounded for no reason of the model's) is captured again at other
    example sizes and proved at a third. A file that still fails is refused, naming the
    nodes that hold the example's sizes; a large model is not run, and those nodes are
    reported. A file off inside a range torch narrowed at a size-1 example (the model's
    branch at 1), where no capture at other sizes is right at the example, holds at the
    example's size only: its range says so, and the adapter refuses other sizes.

    Raises:
        ConversionError: No capture serves the axes, and the file fails at a second size
            or differs from eager there with nodes that hold the example's sizes.
    """
    found = _problem(program_of(built), call, context)
    if found is None:
        return built
    problem, checked, held = found
    ranges = declared_ranges(program_of(built).adapter_spec, widen=True)
    multiples = declared_multiples(program_of(built).adapter_spec)
    kept = kept_conditions(program_of(built).adapter_spec)
    # The capture again at sizes nothing is special about (odd primes, not the check's
    # cheapest second size), proved at a third; comparisons of sizes stay as the example
    # has them (a mask as long as the past plus the new tokens).
    other = resized_call(call, ranges=ranges, multiples=multiples, kept=kept)
    rebuilt = _proved_recapture(program_of, call, other, ranges, multiples, recapture, kept)
    if rebuilt is not None and other is not None:
        _report.record_resized_capture(context, other.text(), problem)
        # Captured at other sizes, not the example's: its parity check runs eager there.
        program_of(rebuilt)._eager_hint = None
        return rebuilt
    if _narrow(program_of(built).adapter_spec) is not None:
        # The file declares the narrow range: it tells the truth, unless it also fails
        # inside it (a one-token example's baked size where no other sizes could be
        # captured: a sliding window of 5 leaves past + seq <= 4), or differs from eager
        # there (a branch of the model's own at the size-1 example: the file holds there
        # only).
        failed = second_size_problem(program_of(built), call, checked) if checked else None
        if failed is None:
            return built
        if "ONNX Runtime failed" not in failed:
            pinned = _pinned_to_example(program_of(built), call, failed)
            if pinned and on_pinned is not None:
                on_pinned(built, pinned)
            else:  # no axis to pin (a range off the inputs' symbols), or no one to tell
                _report.record_unproved_axes(context, failed)
            return built
        problem = failed
    if held or "ONNX Runtime failed" in problem:
        raise unserved_axes_error(problem, held)
    # Numbers differ at other sizes, and no node holds the example's sizes: maybe the
    # model's own numerics at those sizes; reported, not refused.
    _report.record_unproved_axes(context, problem)
    return built


def _pinned_to_example(
    program: ONNXProgram, call: Call, failed: str
) -> list[tuple[str, str, RangeGuard]]:
    """Pin each narrowed or capped axis of ``program``'s inputs to the example's size.

    The file was right at the example and off at a second size inside torch's range, so
    the example's size is all it is proved for: the adapter refuses the others with an
    ``InputShapeError`` that names why.
    """
    spec = program.adapter_spec
    if spec is None:
        return []
    sizes = example_sizes(spec, call)
    pinned: list[tuple[str, str, RangeGuard]] = []
    leaves = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        if tensor is None or not any(_pinnable(b) for b in tensor.axis_ranges):
            leaves.append(leaf)
            continue
        ranges = []
        for bounds in tensor.axis_ranges:
            dim = tensor.shape[bounds.axis]
            if not _pinnable(bounds) or not isinstance(dim, str) or dim not in sizes:
                ranges.append(bounds)
                continue
            size = sizes[dim][0]
            where = f"{tensor.name}[{bounds.axis}]"
            origin = (
                f"the export's check at another size inside torch's range {bounds.text()} "
                f"({failed}): the file holds at the example's size only"
            )
            ranges.append(AxisRange(bounds.axis, size, size, origin))
            guard = RangeGuard(dim, where, failed, "", "", kind="example")
            pinned.append((where, f"[{size}, {size}]", guard))
        tensor = dataclasses.replace(tensor, axis_ranges=tuple(ranges))
        leaves.append(dataclasses.replace(leaf, tensor=tensor))
    program._narrow_inputs(dataclasses.replace(spec, inputs=tuple(leaves)))
    return pinned


def _pinnable(bounds: AxisRange) -> bool:
    """A range torch narrowed for no reason of the model's, or a cap at 2 a size 1 made."""
    return narrowed(bounds) or capped(bounds)


def kept_conditions(spec: AdapterSpec | None) -> Kept | None:
    """The file's conditions between sizes, for other sizes to keep; ``None`` when it has none."""
    if spec is None or not spec.conditions:
        return None
    return Kept(spec.conditions, condition_axes(spec))


def _problem(
    program: ONNXProgram, call: Call, context: DiagnosticContext
) -> tuple[str, Resized | None, list[HeldSize]] | None:
    """What is wrong with ``program``'s dynamic axes, the second size, the held sizes."""
    spec = program.adapter_spec
    if spec is None:
        return None
    sizes = example_sizes(spec, call)
    held = held_example_sizes(program.model, sizes)
    # Not run for large weights, for fake or meta weights (there is nothing to run: trying
    # corrupted the process's heap in test_large_models), random draws, inputs off the CPU.
    if initializer_bytes(program.model) > CHEAP_BYTES or skip_reason(
        program, call.args, call.kwargs
    ):
        _report.record_held_sizes(context, held, proved=False)
        return None
    # Sizes the file accepts: one it refuses (off a multiple the model's code checks)
    # proves nothing.
    second = resized_call(
        call,
        ranges=declared_ranges(spec),
        smallest=True,
        multiples=declared_multiples(spec),
        kept=kept_conditions(spec),
    )
    # widened by a capture at other sizes, even with no second size
    narrow = _narrow(spec) or _refused_example(spec, sizes)
    if second is None:
        return None if narrow is None else (narrow, None, held)
    problem = narrow or second_size_problem(program, call, second)
    return None if problem is None else (problem, second, held)


def _proved_recapture(
    program_of: Callable[[Built], ONNXProgram],
    call: Call,
    second: Resized | None,
    ranges: Mapping[tuple[str, int], tuple[int, float]],
    multiples: Mapping[tuple[str, int], int],
    recapture: Callable[[Call], Built | None],
    kept: Kept | None = None,
) -> Built | None:
    """A capture at ``second``'s sizes, right at the example and at a third size, or ``None``.

    The check at the third size gives no verdict for a file already off at the example
    (it is the parity check's business there): a capture that took another branch at its
    sizes (a window the image fits whole) is off at the example, and must not replace a
    file that is right there.
    """
    if second is None:
        return None
    avoid = {size for *_, size in second.sizes}
    third = resized_call(call, avoid=avoid, ranges=ranges, multiples=multiples, kept=kept)
    rebuilt = recapture(second.call) if third is not None else None
    if rebuilt is None or third is None:
        return None
    again = program_of(rebuilt)
    if not right_at_example(again, call):
        return None
    if second_size_problem(again, call, third) is not None:
        return None
    return rebuilt if _narrow(again.adapter_spec) is None else None


def _refused_example(spec: AdapterSpec, sizes: Mapping[str, tuple[int, str]]) -> str | None:
    """A condition of the file the example's ``sizes`` break: captured on another branch.

    A capture retried at other sizes (the example's made a size static) compares its
    sizes as those sizes do (a mask shorter than the past plus the new tokens), not as
    the example does.
    """
    example = {name: size for name, (size, _) in sizes.items()}
    for condition in spec.conditions:
        if condition.holds(example) is False:
            return (
                f"the file holds where {condition.expression} ({condition.origin}), which "
                "the example's sizes break: it was captured on another branch"
            )
    return None


def _narrow(spec: AdapterSpec | None) -> str | None:
    """A range another capture may widen: torch's for no reason, or a cap a size 1 made."""
    return narrowed_range(spec) or capped_range(spec)
