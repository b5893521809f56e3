"""The edge probe: the export's own check, at the edges of what the file's signature allows.

The parity check runs the example; the served-axes check one other size. Neither shows
what users feed at the edges, where torch and ONNX Runtime part ways:

- **the smallest size** each dynamic axis allows (1, or the low end of its range, skipping
  sizes the file excludes): a branch on size 1, a reshape that holds the example;
- **a fully masked row** of each mask-like input (a bool tensor, or one named ``*mask*``):
  a padded row whose every key is hidden, where torch's safe softmax gives 0 and a plain
  ``Softmax`` gives NaN.

Each probe runs the model eagerly and the file in ONNX Runtime (the session the parity
check built), and compares them within the tolerance of the served-axes check. A
mismatch is a :class:`~onnx_export.errors.ParityWarning` naming the probe and the model's
line of the first node that diverges; ONNX Runtime failing where eager runs is a
:class:`~onnx_export.errors.ConversionError` at export time, not a first call's surprise.
A probe that eager itself refuses proves nothing and is dropped.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnx_export.adapters import AdapterSpec, AxisRange, DimCondition, InputError
from onnx_export.capture._call import Call
from onnx_export.capture._dynamic import leaf_items, named_inputs
from onnx_export.capture._specialized import RangeGuard
from onnx_export.capture._user_code import warn_at_user_line
from onnx_export.diagnostics import DiagnosticContext, rules
from onnx_export.errors import ConversionError, ParityWarning
from onnx_export.program._adapter import with_size_one_refused
from onnx_export.program._program import ONNXProgram
from onnx_export.program._served_axes import _eager, _error, _leaves
from onnx_export.reporting._records import call_site, origin_locations
from onnx_export.translation._source import node_origin

__all__ = [
    "EdgeProbe",
    "ProbeMismatch",
    "edge_probes",
    "probe_edges",
    "probe_and_record",
    "probe_wanted",
    "record_probe",
    "warn_probe",
]

#: A probe differs when its worst error passes this many tolerances (those of the
#: served-axes check: other sizes drift more than the example).
_LIMIT = 10.0


@dataclasses.dataclass(frozen=True)
class EdgeProbe:
    """One edge input: what it is, and the call that feeds it.

    Attributes:
        name: What the probe feeds, for messages (``"smallest sizes x[0]=1"``).
        call: The export's call with those inputs.
        axes: ``(input, axis)`` the probe set to size 1.
    """

    name: str
    call: Call
    axes: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class ProbeMismatch:
    """A probe where the file's outputs differ from eager PyTorch's.

    Attributes:
        probe: The probe's name.
        error: The worst error in units of the tolerance (``inf``: NaN or another shape).
        where: ``file:line`` of the model's code of the first node that diverges, or ``""``.
        node: That ONNX node's name, or ``""``.
        origin: That node's origin (file, line, stack) for the report, or ``None``.
    """

    probe: str
    error: float
    where: str = ""
    node: str = ""
    origin: Any = dataclasses.field(default=None, compare=False, repr=False)

    def text(self) -> str:
        """``fully masked row of mask: NaN or inf where eager is finite (node X at f.py:3)``."""
        what = "NaN, inf or another shape" if math.isinf(self.error) else f"{self.error:.3g}x"
        at = f" (first diverging node {self.node} at {self.where})" if self.where else ""
        return f"{self.probe}: {what} beyond the tolerance{at}"


def _tensors(call: Call) -> Iterator[tuple[str, torch.Tensor]]:
    for name, value in named_inputs(call.signature, call.args, call.kwargs).items():
        for path, leaf in leaf_items(name, value):
            if isinstance(leaf, torch.Tensor):
                yield path, leaf


def _with(call: Call, replaced: Mapping[str, torch.Tensor]) -> Call:
    """``call`` with the tensors at ``replaced``'s paths swapped for its tensors."""
    by_id = {id(t): replaced[p] for p, t in _tensors(call) if p in replaced}
    args, kwargs = pytree.tree_map(
        lambda leaf: by_id.get(id(leaf), leaf), (call.args, dict(call.kwargs))
    )
    return dataclasses.replace(call, args=tuple(args), kwargs=dict(kwargs))


def _smallest(ranges: list[AxisRange]) -> int:
    """The smallest size >= 1 that every range of one dimension holds."""
    start = max([1, *(r.low or 0 for r in ranges)])
    for size in range(start, start + 4096):
        if all(r.holds(size) for r in ranges):
            return size
    return start


def _smallest_sizes(spec: AdapterSpec) -> dict[str, int]:
    """Each dynamic dimension's smallest allowed size, by its name in the file."""
    ranges: dict[str, list[AxisRange]] = {}
    for leaf in spec.inputs:
        tensor = leaf.tensor
        if tensor is None or tensor.python_int:
            continue
        for axis, dim in enumerate(tensor.shape):
            if isinstance(dim, str):
                ranges.setdefault(dim, []).extend(r for r in tensor.axis_ranges if r.axis == axis)
    if any(not name.isidentifier() for name in ranges):
        return {}  # a derived dimension (``2*h``): its root's sizes are not ours to pick
    sizes = {name: _smallest(found) for name, found in ranges.items()}
    return _keeping_conditions(spec.conditions, sizes, ranges)


#: How far above its smallest size a dimension a condition reads is searched, and how
#: many such dimensions are searched together.
_CONDITION_REACH, _CONDITION_DIMS = 9, 4


def _keeping_conditions(
    conditions: Sequence[DimCondition],
    sizes: dict[str, int],
    ranges: Mapping[str, list[AxisRange]],
) -> dict[str, int]:
    """The smallest sizes that keep the file's conditions (``total = past + seq``: 1, 1, 2).

    Sizes the file refuses prove nothing; the sizes with the smallest sum that keep every
    condition are probed instead (``sizes`` unchanged when none is found nearby).
    """
    if all(c.holds(sizes) is not False for c in conditions):
        return sizes
    names = sorted({n for c in conditions for n in c.names if n in sizes})
    if len(names) > _CONDITION_DIMS:
        return sizes
    reach = {n: range(sizes[n], sizes[n] + _CONDITION_REACH) for n in names}
    steps = [[v for v in reach[n] if all(r.holds(v) for r in ranges[n])] for n in names]
    for values in sorted(itertools.product(*steps), key=sum):
        trial = {**sizes, **dict(zip(names, values, strict=True))}
        if all(c.holds(trial) is not False for c in conditions):
            return trial
    return sizes


def _resize(tensor: torch.Tensor, sizes: Mapping[int, int]) -> torch.Tensor:
    out = tensor
    with torch.no_grad():
        for axis, size in sizes.items():
            index = torch.arange(size, device=tensor.device) % max(tensor.shape[axis], 1)
            out = out.index_select(axis, index)
    return out


def _smallest_probe(spec: AdapterSpec, call: Call) -> EdgeProbe | None:
    """The call with every dynamic axis at its smallest size, when any axis changes."""
    sizes = _smallest_sizes(spec)
    tensors = dict(_tensors(call))
    replaced: dict[str, torch.Tensor] = {}
    changed: list[str] = []
    ones: list[tuple[str, int]] = []
    for leaf in spec.inputs:
        tensor = leaf.tensor
        example = tensors.get(tensor.name) if tensor is not None else None
        if tensor is None or example is None or example.dim() != len(tensor.shape):
            continue
        axes = {
            a: sizes[d]
            for a, d in enumerate(tensor.shape)
            if isinstance(d, str) and d in sizes and example.shape[a] != sizes[d]
        }
        if any(example.shape[a] == 0 for a in axes):
            return None
        if axes:
            replaced[tensor.name] = _resize(example, axes)
            changed += [f"{tensor.name}[{a}]={s}" for a, s in axes.items()]
            ones += [(tensor.name, a) for a, s in axes.items() if s == 1]
    if not replaced:
        return None
    name = f"the smallest sizes ({', '.join(changed[:6])})"
    return EdgeProbe(name, _with(call, replaced), tuple(ones))


def _masked_row(name: str, tensor: torch.Tensor) -> torch.Tensor | None:
    """``tensor`` with its first row fully masked, or ``None`` when it is not mask-like.

    A bool tensor masks with ``True`` when its name says padding (``key_padding_mask``),
    else with ``False`` (SDPA's ``attn_mask``: ``True`` attends); an int ``*mask*`` with
    0 (transformers' ``attention_mask``); a float ``*mask*`` with ``-inf`` when its values
    are additive (all <= 0), else with 0.
    """
    last = name.rsplit(".", 1)[-1].lower()
    if tensor.dim() == 0 or tensor.numel() == 0:
        return None
    if tensor.dtype == torch.bool:
        value: Any = "pad" in last
    elif "mask" not in last:
        return None
    elif tensor.is_floating_point():
        value = -math.inf if bool((tensor <= 0).all()) else 0.0
    elif not tensor.is_complex():
        value = 0
    else:
        return None
    out = tensor.clone()
    out[0] = value
    return None if torch.equal(out, tensor) else out


def _mask_probes(call: Call) -> list[EdgeProbe]:
    probes = []
    for path, tensor in _tensors(call):
        masked = _masked_row(path, tensor)
        if masked is not None:
            probes.append(EdgeProbe(f"a fully masked row of {path}", _with(call, {path: masked})))
    return probes[:2]


def edge_probes(spec: AdapterSpec | None, call: Call) -> list[EdgeProbe]:
    """The probes the signature shows: the smallest sizes, a fully masked row per mask."""
    if spec is None:
        return []
    smallest = _smallest_probe(spec, call)
    return ([smallest] if smallest is not None else []) + _mask_probes(call)


def _culprit(program: ONNXProgram, probe: EdgeProbe) -> tuple[str, str, Any]:
    """The first diverging node at ``probe`` and its line (``""`` when none is found)."""
    try:
        result = program._check_parity(probe.call.args, dict(probe.call.kwargs), 1e-3, 1e-4)
    except Exception:  # the comparison itself failed: no node to name
        return "", "", None
    culprit = result.culprit
    if culprit is None:
        return "", "", None
    return culprit.origin.where, str(culprit.node), culprit.origin


#: Where the adapter's run error turns to advice for a caller of a saved file.
_CALLER_ADVICE = " The file cannot serve these inputs"


def _failed(probe: EdgeProbe, error: Exception, program: ONNXProgram) -> ConversionError:
    text = (str(error).strip().splitlines() or [""])[0]
    # ONNX Runtime's own words only: the adapter's advice to a caller of a saved file (call
    # it at the example's sizes, export it again) is not this export's next step.
    text = text.split(_CALLER_ADVICE)[0].rstrip(".")[:400]
    dropped = dropped_size(program)
    return ConversionError(
        f"The exported file fails in ONNX Runtime at {probe.name}, where eager PyTorch runs."
        f"{dropped} ONNX Runtime: {type(error).__name__}: {text}. The export probes the edges "
        "its signature allows so that this is not the first call's surprise. Next steps: "
        "export with those sizes in the example, bound the axes with Dim(min=...) so the file "
        "refuses them, or report it with the SARIF report attached."
    )


def _shape_text(value: Any) -> str:
    return "[" + ", ".join(str(d) for d in value.shape) + "]"


def dropped_size(program: ONNXProgram) -> str:
    """Where torch.export's own shapes lose a dynamic size, as a sentence (``""`` if nowhere).

    An elementwise op's output has each input's (broadcast) size; a captured graph whose
    output holds 1 where an input holds a symbol has replaced that size by 1 without a
    guard (seen with a sliding-window cache: ``mean`` of ``[s23, s70, 1]``, plus eps, gave
    ``[s23, 1, 1]``). The file then computes everything after that node at size 1, and
    fails at other sizes: this names the node and the model's line.
    """
    exported = program.exported_program
    try:
        for node in exported.graph.nodes if exported is not None else ():
            target = node.target
            if node.op != "call_function" or torch.Tag.pointwise not in getattr(target, "tags", ()):
                continue
            out = node.meta.get("val")
            if not isinstance(out, torch.Tensor):
                continue
            for arg in node.all_input_nodes:
                value = arg.meta.get("val")
                if not isinstance(value, torch.Tensor) or value.dim() > out.dim():
                    continue
                if any(
                    isinstance(value.shape[-i], torch.SymInt) and out.shape[-i] == 1
                    for i in range(1, value.dim() + 1)
                    if isinstance(out.shape[-i], int)
                ):
                    origin = node_origin(node)
                    where = f" at {origin.file}:{origin.line}" if origin.file else ""
                    return (
                        f" torch.export's own shapes lose a dynamic size at node "
                        f"'{node.name}' ({target}){where}: its input '{arg.name}' is "
                        f"{_shape_text(value)} and its output {_shape_text(out)}, so the file "
                        "computes what follows at size 1 there, which no other size fits "
                        "(torch recorded no guard for it)."
                    )
    except Exception:  # a diagnosis only: never in the way of the error it explains
        return ""
    return ""


SizeOne = tuple[str, int, RangeGuard]


def probe_edges(
    program: ONNXProgram, call: Call, size_one: Sequence[SizeOne] = ()
) -> tuple[list[ProbeMismatch], list[SizeOne]]:
    """Run every edge probe; the mismatches (with their lines), and the size-1 branches.

    ``size_one``: ``(input, axis, guard)`` where the model's code compared a size with 1.
    When the probe at size 1 fails or differs and such a comparison is on a probed axis,
    the file is made to refuse size 1 there (naming the guard's line) instead of a
    warning or an error: those are returned second.

    Raises:
        ConversionError: ONNX Runtime fails at a probe where eager PyTorch runs.
    """
    found: list[ProbeMismatch] = []
    refused: list[SizeOne] = []
    for probe in edge_probes(program.adapter_spec, call):
        want = _eager(probe.call)
        if want is None:
            continue  # eager refuses the probe itself: nothing to prove
        branches = [c for c in size_one if (c[0], c[1]) in probe.axes]
        try:
            got = _leaves(program(*probe.call.args, **probe.call.kwargs))
        except InputError:
            continue  # outside what the file declares: it says so itself
        except Exception as error:
            if branches:
                refused += branches
                continue
            raise _failed(probe, error, program) from error
        worst = _error(got, want)
        if worst is None or worst <= _LIMIT:
            continue
        if branches:
            refused += branches
            continue
        found.append(ProbeMismatch(probe.name, worst, *_culprit(program, probe)))
    if refused and program.adapter_spec is not None:
        _respec(program, with_size_one_refused(program.adapter_spec, refused))
    return found, refused


def _respec(program: ONNXProgram, spec: AdapterSpec) -> None:
    """Give ``program`` ``spec``; its adapter and session are built again on the next call."""
    program.adapter_spec = spec
    program._inputs = None
    program._module = None


def probe_wanted(result: Any, verify: bool | None) -> bool:
    """Whether the probe runs: the parity check ran (cheap model, real weights) and agreed."""
    return verify is not False and result is not None and bool(result.ok)


def probe_and_record(
    program: ONNXProgram,
    call: Call,
    context: DiagnosticContext,
    size_one: Sequence[SizeOne] = (),
) -> tuple[list[ProbeMismatch], tuple[tuple[str, str, RangeGuard], ...]]:
    """:func:`probe_edges`, its mismatches recorded (OXE0022).

    Returns:
        The mismatches, and ``(input[axis], range, guard)`` of each size-1 branch now
        refused (for the ``ShapeRangeWarning`` and OXE0020 of guarded ranges).

    Raises:
        ConversionError: ONNX Runtime fails at a probe where eager PyTorch runs.
    """
    found, refused = probe_edges(program, call, size_one)
    record_probe(context, found)
    return found, tuple((f"{n}[{a}]", "any size but 1", g) for n, a, g in refused)


def record_probe(context: DiagnosticContext, mismatches: list[ProbeMismatch]) -> None:
    """An OXE0022 warning per probe whose outputs differ, at the diverging node's line."""
    for mismatch in mismatches:
        origin = mismatch.origin
        locations, stacks = origin_locations(origin) if origin is not None else ((), ())
        context.emit(
            rules.PARITY_MISMATCH,
            message_args={
                "reference": f"eager PyTorch at {mismatch.probe}",
                "outputs": "the outputs",
                "cause": mismatch.text(),
            },
            locations=locations or call_site(),
            stacks=stacks,
        )


def warn_probe(mismatches: list[ProbeMismatch]) -> None:
    """A ``ParityWarning`` per probe whose outputs differ, at the diverging node's line."""
    for mismatch in mismatches:
        message = (
            f"The exported model's outputs differ from eager PyTorch at an edge input the "
            f"export probed, {mismatch.text()}. The example agrees; inputs like this one "
            "(a padded batch, the smallest size) will not. Check that op's ONNX function, "
            "bound the axis with Dim(min=...), or report it with the SARIF report attached."
        )
        path, _, line = mismatch.where.rpartition(":")
        if path and line.isdigit():
            warnings.warn_explicit(message, ParityWarning, path, int(line))
        else:
            warn_at_user_line(message, ParityWarning)
