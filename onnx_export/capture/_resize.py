"""Other example sizes for the dynamic axes: to capture again, and to prove a file at a second size.

torch.export specialises what the example makes special: sizes 0 and 1, and sizes that
happen to equal another size of the model (a batch of 10 beside a sequence of 10). The
model's code may hold for any size, and the user's example still lands on a special
one. :func:`resized_call` makes the example another size along every dynamic axis, the
values repeated cyclically along the axis (token ids stay ids, masks stay masks), so that
the capture can be redone, or the exported graph run, at sizes nothing is special about.

Axes the user named alike (``"batch"``) get one new size; unnamed dynamic axes with the
same example size are taken to be one dimension too. New sizes are small odd primes that
equal no static size of the inputs, no example size, and each other, inside the user's
``Dim`` bounds and any range given.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnx_export.adapters import DimCondition
from onnx_export.capture._call import AxisTie, Call
from onnx_export.capture._dynamic import leaf_items, named_inputs
from onnx_export.capture._shape_fixes import _leaf_specs, user_dims

__all__ = ["Kept", "Resized", "resized_call"]

#: Sizes tried first: odd primes, unlikely to equal a size of the model.
_SIZES = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43)


@dataclasses.dataclass(frozen=True)
class Resized:
    """The call at other example sizes.

    Attributes:
        call: The same call, its tensors resized along their dynamic axes.
        sizes: ``(input path, axis, example size, new size)`` for each resized axis.
    """

    call: Call
    sizes: tuple[tuple[str, int, int, int], ...]

    def text(self) -> str:
        """``x[0]: 10 -> 3, x[1]: 1 -> 5`` for messages."""
        return ", ".join(f"{p}[{a}]: {old} -> {new}" for p, a, old, new in self.sizes)


def _group(dim: Any, size: int) -> Any:
    """Axes of one group share a new size: the user's name, else the example size."""
    if isinstance(dim, str):
        return ("name", dim)
    name = getattr(dim, "__name__", None)
    if name and type(dim).__name__ != "DimHint":
        return ("name", name)
    return ("size", size)


def _bounds(dim: Any) -> tuple[int, float]:
    low, high = getattr(dim, "min", None), getattr(dim, "max", None)
    low = low if isinstance(low, int) else 0
    high = high if isinstance(high, int) and not isinstance(high, bool) else float("inf")
    return low, high


def _fresh(taken: set[int], low: int, high: float, multiple: int = 1) -> Iterator[int]:
    """New sizes in ``[low, high]``, odd primes first (multiples of ``multiple`` where asked)."""
    sizes: Iterator[int] = itertools.chain(_SIZES, range(2, 10_000))
    if multiple > 1:  # the file refuses other sizes: a multiple of an odd prime
        sizes = (multiple * s for s in itertools.chain(_SIZES, range(1, 10_000)))
    return (size for size in sizes if size not in taken and low <= size <= high)


def _tensors(call: Call) -> Iterator[tuple[str, torch.Tensor]]:
    inputs = named_inputs(call.signature, call.args, call.kwargs)
    for name, value in inputs.items():
        for path, leaf in leaf_items(name, value):
            if isinstance(leaf, torch.Tensor):
                yield path, leaf


@dataclasses.dataclass(frozen=True)
class Kept:
    """Comparisons of sizes the new sizes keep as the example has them (``total = past + seq``).

    Attributes:
        conditions: The file's conditions (:class:`~onnx_export.adapters.DimCondition`); the
            linear ones are kept: each side stays larger, smaller or equal as at the example.
        axes: Each dimension a condition reads -> an ``(input path, axis)`` that has it.
    """

    conditions: tuple[DimCondition, ...] = ()
    axes: Mapping[str, tuple[str, int]] = dataclasses.field(default_factory=dict)

    def keeps(
        self,
        example: Mapping[tuple[str, int], int],
        new: Mapping[tuple[str, int], int],
    ) -> bool:
        """Whether ``new`` sizes keep each decided comparison as at ``example``.

        A comparison the example meets with room to spare is kept by any sizes that meet
        it; one the example meets exactly (``total = past + seq``) stays exact.
        """
        for condition in self.conditions:
            if not condition.linear:
                continue  # a product of sizes: what the example's special sizes made
            keys = [self.axes.get(name) for name in condition.names]
            if any(k is None or k not in new or k not in example for k in keys):
                continue  # not decided yet
            pairs = list(zip(condition.names, keys, strict=True))
            at_new = {n: new[k] for n, k in pairs if k is not None}
            before = condition.difference({n: example[k] for n, k in pairs if k is not None})
            after = condition.difference(at_new)
            if before is None or after is None:
                continue
            if before != 0 and condition.holds(at_new):
                continue  # inside, as the example (``past + seq <= 5`` at 3, then at 5)
            if (before > 0) != (after > 0) or (before < 0) != (after < 0):
                return False
        return True


def _candidates(
    taken: set[int], low: int, high: float, multiple: int, first: int | None
) -> Iterator[int]:
    """Sizes to try for a group: ``first``, then new sizes, then sizes already taken."""
    if first is not None:
        yield first
    yield from _fresh(taken, low, high, multiple)
    step = max(multiple, 1)
    for size in range(max(low, 1), int(min(high, 10_000)) + 1):
        if size % step == 0 and size in taken:
            yield size


@dataclasses.dataclass(frozen=True)
class _Group:
    """Axes that take one new size, and where that size may lie."""

    axes: tuple[tuple[str, int], ...]
    low: int
    high: float
    multiple: int
    small: bool
    example: int


#: Candidate sizes tried per group, and checks in all, where sizes must keep comparisons.
_PER_GROUP, _TRIES = 16, 20_000


def _taken_sizes(
    taken: set[int], low: int, high: float, multiple: int, floor: int, example: int
) -> Iterator[int]:
    """Sizes in use, from ``floor`` up, in ``[low, high]``; never a size-1 example's 1 again."""
    step = max(multiple, 1)
    inside = (s for s in sorted(taken | {1}) if max(low, floor) <= s <= high)
    return (s for s in inside if s % step == 0 and not s == example == 1)


def _kept_sizes(
    kept: Kept | None,
    example: Mapping[tuple[str, int], int],
    decided: Mapping[tuple[str, int], int],
    groups: list[_Group],
    taken: set[int],
    floor: int = 2,
) -> list[int] | None:
    """A new size for each group, distinct where it can be, keeping the file's comparisons.

    Without comparisons each group takes its first candidate. With them the groups are
    sized together, depth first: a comparison over several groups (``past + seq < 7``)
    can rule out a choice only once the others are made, so an earlier group's size is
    revised (``seq`` 7 -> 2) rather than leaving a later group no size at all. Sizes
    already in use come last, from ``floor`` up (1 for a check that runs the file there:
    a window of 4 leaves ``past 1, seq 2`` as the only other sizes to run).
    """
    check = kept if kept is not None and kept.conditions else None
    read = set(check.axes.values()) if check is not None else set()
    tries = 0

    def search(index: int, chosen: dict[tuple[str, int], int], used: set[int]) -> list[int] | None:
        nonlocal tries
        if index == len(groups):
            return []
        group = groups[index]
        first = 2 if group.small and 2 not in used else None
        candidates = _candidates(taken | used, group.low, group.high, group.multiple, first)
        if group.axes[0] in read:  # new sizes first, then small ones already taken (2, 3)
            candidates = itertools.chain(
                itertools.islice(candidates, _PER_GROUP),
                _taken_sizes(
                    taken | used, group.low, group.high, group.multiple, floor, group.example
                ),
            )
        else:  # no comparison reads it: its first new size is as good as any (or none)
            fresh = _fresh(taken | used, group.low, group.high, group.multiple)
            candidates = itertools.islice(itertools.chain([first] if first else [], fresh), 1)
        for size in candidates:
            tries += 1
            new = {**chosen, **dict.fromkeys(group.axes, size)}
            if check is not None and (tries > _TRIES or not check.keeps(example, new)):
                continue
            rest = search(index + 1, new, used | {size})
            if rest is not None:
                return [size, *rest]
        return None

    return search(0, dict(decided), set())


def _new_sizes(
    call: Call,
    avoid: set[int],
    ranges: Mapping[tuple[str, int], tuple[int, float]],
    smallest: bool = False,
    multiples: Mapping[tuple[str, int], int] | None = None,
    kept: Kept | None = None,
) -> dict[tuple[str, int], tuple[int, int]] | None:
    """``(path, axis) -> (example size, new size)`` for each dynamic axis; None when none."""
    if call.shapes is None:
        return None
    tensors = dict(_tensors(call))
    dims = {k: d for k, d in _aligned_dims(call).items() if k[0] in tensors}
    tied = {tie.axis: tie for tie in call.ties if tie.axis in dims}
    if not dims:
        return None
    taken = set(avoid)
    for path, tensor in tensors.items():
        taken.update(s for a, s in enumerate(tensor.shape) if (path, a) not in dims)
    taken.update(int(tensors[p].shape[a]) for p, a in dims)
    example = {(p, a): int(t.shape[a]) for p, t in tensors.items() for a in range(t.dim())}
    chosen: dict[Any, int] = {}
    sizes: dict[tuple[str, int], tuple[int, int]] = {}
    # Derived dims (``2 * Dim("h")``) first take their root's size, so an axis the user
    # tied to another by a formula keeps that formula at the new size (an even height
    # stays even), and the root's own axes then share it.
    ordered = sorted(dims.items(), key=lambda item: _derived(item[1]) is None)
    groups: dict[Any, list[tuple[str, int]]] = {}
    for key_axis, dim in ((k, d) for k, d in ordered if k not in tied and _derived(d) is None):
        groups.setdefault(_group(dim, example[key_axis]), []).append(key_axis)
    pending: dict[Any, _Group] = {}
    for (path, axis), dim in ordered:
        if (path, axis) in tied:
            continue  # its size follows from the others' (below)
        old = int(tensors[path].shape[axis])
        if old == 0:
            return None  # nothing to repeat
        derived = _derived(dim)
        if derived is not None:
            root, fn = derived
            key = _group(root, -1)
            if key not in chosen:
                root_size = _pick_root(root, fn, taken, ranges.get((path, axis)))
                if root_size is None:
                    return None
                chosen[key] = root_size
                taken.update({root_size, fn(root_size)})
            sizes[(path, axis)] = (old, fn(chosen[key]))
            continue
        key = _group(dim, old)
        if key not in pending:
            # every axis of the group takes the size: the narrowest range of any of them
            found = [ranges[a] for a in groups[key] if a in ranges]
            given = (
                max((r[0] for r in found), default=0),
                min((r[1] for r in found), default=float("inf")),
            )
            multiple = (multiples or {}).get((path, axis), 1)
            space = (dim, given, multiple, old)
            pending[key] = _space(groups[key], space, smallest and 2 not in taken)
    decided = {k: v[1] for k, v in sizes.items()}
    floor = 1 if smallest else 2  # a capture at size 1 would fix that size
    picked = _kept_sizes(kept, example, decided, list(pending.values()), taken, floor)
    if picked is None:
        return None
    chosen.update(zip(pending, picked, strict=True))
    free = [(k, d) for k, d in ordered if k not in tied and _derived(d) is None]
    sizes.update({k: (example[k], chosen[_group(d, example[k])]) for k, d in free})
    return _with_ties(sizes, tied, tensors)


def _space(axes: list[tuple[str, int]], space: tuple[Any, Any, int, int], small: bool) -> _Group:
    """Where a group's new size may lie: the dim's bounds within the given range."""
    dim, (given_low, given_high), multiple, old = space
    low, high = _bounds(dim)
    low, high = max(low, given_low), min(high, given_high)
    # A size-1 example grows to 2 where asked (``smallest``): any other size shows a
    # baked 1, and the check that runs the model there pays for each row it adds.
    small = small and old == 1 and low <= 2 <= high and multiple in (1, 2)
    return _Group(tuple(axes), low, high, multiple, small, old)


def _aligned_dims(call: Call) -> dict[tuple[str, Any], Any]:
    """The user's dims by the call's own leaf paths.

    A container given in the dynamic shapes by position (a ``DynamicCache`` as its lists of
    key and value tensors: ``cache.0.1``) has other paths than its flattened leaves
    (``cache.key_cache.1``); leaves are matched by position when the counts agree.
    """
    assert call.shapes is not None
    dims = user_dims(call.shapes.names)
    inputs = named_inputs(call.signature, call.args, call.kwargs)
    renamed: dict[str, str] = {}
    for name, spec in call.shapes.names.items():
        if name not in inputs:
            continue
        ours = [p for p, _ in leaf_items(name, inputs[name])]
        theirs = [p for p, _ in _leaf_specs(spec, name, with_none=True)]
        if len(ours) == len(theirs) and not set(theirs) <= set(ours):
            renamed.update(zip(theirs, ours, strict=True))
    return {(renamed.get(path, path), axis): dim for (path, axis), dim in dims.items()}


def _with_ties(
    sizes: dict[tuple[str, int], tuple[int, int]],
    tied: Mapping[tuple[str, int], AxisTie],
    tensors: Mapping[str, torch.Tensor],
) -> dict[tuple[str, int], tuple[int, int]] | None:
    """``sizes`` with each tied axis at the size its relation gives (``c = 32 - t``)."""
    new = {k: v[1] for k, v in sizes.items()}
    for key, tie in tied.items():
        size = tie.size(new)
        if size is None or size < 2:
            return None  # no second size keeps the relation here
        sizes[key] = (int(tensors[key[0]].shape[key[1]]), size)
    return sizes


def _derived(dim: Any) -> tuple[Any, Any] | None:
    """``(root dim, size formula)`` of a derived ``Dim`` (``2 * Dim("h")``), else ``None``."""
    root, fn = getattr(dim, "root", None), getattr(dim, "fn", None)
    if root is None or not callable(fn):
        return None
    return root, fn


def _pick_root(root: Any, fn: Any, taken: set[int], given: tuple[int, float] | None) -> int | None:
    """A size of ``root`` whose derived size is new and inside the bounds of both."""
    low, high = _bounds(root)
    given_low, given_high = given or (0, float("inf"))
    for size in itertools.chain(_SIZES, range(2, 10_000)):
        if not low <= size <= high or size in taken:
            continue
        derived = fn(size)
        if derived not in taken and given_low <= derived <= given_high and derived >= 2:
            return int(size)
    return None


def _resize(tensor: torch.Tensor, axes: Mapping[int, int]) -> torch.Tensor:
    with torch.no_grad():
        out = tensor
        for axis, size in axes.items():
            index = torch.arange(size, device=tensor.device) % tensor.shape[axis]
            out = out.index_select(axis, index)
    return out.requires_grad_(tensor.requires_grad) if tensor.is_floating_point() else out


def resized_call(
    call: Call,
    avoid: set[int] | None = None,
    ranges: Mapping[tuple[str, int], tuple[int, float]] | None = None,
    *,
    smallest: bool = False,
    multiples: Mapping[tuple[str, int], int] | None = None,
    kept: Kept | None = None,
) -> Resized | None:
    """``call`` with every dynamic axis of its tensors at another size, or ``None``.

    Args:
        call: The export's call; its dynamic shapes say which axes to resize.
        avoid: Sizes not to use (those of an earlier resize).
        ranges: ``(input path, axis) -> (low, high)`` the new sizes must lie in (the
            ranges a file declares).
        smallest: An axis whose example size is 1 takes 2 (when no static size of the
            inputs is 2), not the first odd prime: for a check that runs the model there,
            whose cost grows with the size (a batch of 1 made 3 runs three rows).
        multiples: ``(input path, axis) -> n``: that axis takes a multiple of ``n`` (a
            file that refuses other sizes, a patch size the model's code checks).
        kept: Comparisons of sizes the new sizes keep as the example has them (the
            file's conditions: a mask as long as the past plus the new tokens stays so).

    Returns ``None`` when there is nothing to resize (no dynamic tensor axis, an empty
    axis, no signature to rebuild the call with, no size left in a range).

    Example:
        >>> import torch
        >>> from onnx_export._options import ExportOptions
        >>> from onnx_export.capture._call import forward_signature, prepare_call
        >>> model = torch.nn.Linear(4, 2)
        >>> options = ExportOptions(dynamic_shapes={"input": {0: "batch"}})
        >>> call = prepare_call(model, forward_signature(model), (torch.ones(1, 4),), {}, options)
        >>> resized_call(call).text()
        'input[0]: 1 -> 3'
    """
    if call.signature is None:
        return None
    sizes = _new_sizes(call, avoid or set(), ranges or {}, smallest, multiples, kept)
    if not sizes:
        return None
    per_path: dict[str, dict[int, int]] = {}
    for (path, axis), (_, new) in sizes.items():
        per_path.setdefault(path, {})[axis] = new
    bound = call.signature.bind(*call.args, **call.kwargs)
    var_keyword = {p.name for p in call.signature.parameters.values() if p.kind == p.VAR_KEYWORD}
    replaced: dict[int, torch.Tensor] = {}
    for name, value in list(bound.arguments.items()):
        if name in var_keyword:
            bound.arguments[name] = {
                k: _resized_value(k, v, per_path, replaced) for k, v in value.items()
            }
        else:
            bound.arguments[name] = _resized_value(name, value, per_path, replaced)
    canonical = pytree.tree_map(lambda leaf: replaced.get(id(leaf), leaf), call.canonical)
    call2 = dataclasses.replace(
        call, args=tuple(bound.args), kwargs=dict(bound.kwargs), canonical=canonical, size_one=()
    )
    listed = tuple((p, a, old, new) for (p, a), (old, new) in sizes.items())
    return Resized(call2, listed)


def _resized_value(
    name: str,
    value: Any,
    per_path: Mapping[str, Mapping[int, int]],
    replaced: dict[int, torch.Tensor],
) -> Any:
    """``value`` with its tensor leaves resized, by their dotted path under ``name``.

    Each replaced tensor is recorded in ``replaced`` by the ``id`` of the original.
    """
    flat, tree = pytree.tree_flatten(value)
    paths = [p for p, _ in leaf_items(name, value)]
    leaves = []
    for path, leaf in zip(paths, flat, strict=True):
        if isinstance(leaf, torch.Tensor) and path in per_path:
            replaced[id(leaf)] = _resize(leaf, per_path[path])
            leaves.append(replaced[id(leaf)])
        else:
            leaves.append(leaf)
    return pytree.tree_unflatten(leaves, tree)
