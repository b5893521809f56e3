"""Whether a file serves the dynamic axes it declares: checked before the export returns.

An input that reads ``[batch, seq, 16]`` promises any batch and sequence. torch.export may
still have baked the example's sizes into the graph (a size-1 example, a size that equals
another size of the model): a ``Reshape`` that holds ``{1, 16}`` runs at the example and
fails, or answers wrongly, at any other size. Two checks:

- **Held sizes** (cheap, always): constants in shape positions (``Reshape``/``Expand``/
  ``Tile`` shapes, ``Slice`` bounds, ``ConstantOfShape``, ``Range``) equal to an example
  size of a dynamic axis of 2 or more, or a product of two. Such a constant is a suspect,
  not a proof: a model's own size may coincide with the example.
- **A second size** (where the model is small): the exported graph runs in ONNX Runtime
  at the example and at other sizes of every dynamic axis, against eager PyTorch at both.
  A graph right at the example that fails or answers wrongly at the second size does not
  serve its axes.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from onnx_export.adapters import AdapterSpec, AxisRange, InputError
from onnx_export.capture._call import Call
from onnx_export.capture._resize import Resized
from onnx_export.errors import ConversionError
from onnx_export.program._adapter import TORCH_RANGE
from onnx_export.program._modes import kept
from onnx_export.program._program import EagerAtSecondSize, ONNXProgram
from onnx_export.program._tolerance import tolerance_units

__all__ = [
    "CHEAP_BYTES",
    "HeldSize",
    "capped",
    "capped_range",
    "declared_multiples",
    "declared_ranges",
    "example_sizes",
    "held_example_sizes",
    "narrowed",
    "narrowed_range",
    "right_at_example",
    "second_size_problem",
    "unserved_axes_error",
]

#: Models with at most this many bytes of weights are run at a second size.
CHEAP_BYTES = 64 * 2**20

#: Inputs of each op that hold sizes or bounds.
_SHAPE_INPUTS: Mapping[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Slice": (1, 2),
    "Range": (0, 1),
}


@dataclasses.dataclass(frozen=True)
class HeldSize:
    """A node that holds a constant equal to an example size of a dynamic axis.

    Attributes:
        node: The ONNX node's name.
        op: Its op type.
        value: The constant.
        axes: The dynamic axes whose example size (or product) it equals (``"x[0]"``).
        where: ``file:line`` of the model's code the node came from, or ``""``.
    """

    node: str
    op: str
    value: int
    axes: str
    where: str

    def __str__(self) -> str:
        at = f" (from {self.where})" if self.where else ""
        return f"node {self.node!r} ({self.op}{at}) holds {self.value}, the example's {self.axes}"


def example_sizes(spec: AdapterSpec, call: Call) -> dict[str, tuple[int, str]]:
    """Each symbolic dimension of the inputs: its example size and the first axis that has it."""
    from onnx_export.capture._dynamic import leaf_items, named_inputs

    tensors = {
        path: leaf
        for name, value in named_inputs(call.signature, call.args, call.kwargs).items()
        for path, leaf in leaf_items(name, value)
        if isinstance(leaf, torch.Tensor)
    }
    sizes: dict[str, tuple[int, str]] = {}
    for leaf in spec.inputs:
        tensor = leaf.tensor
        example = tensors.get(tensor.name) if tensor is not None else None
        if tensor is None or example is None or example.dim() != len(tensor.shape):
            continue
        for axis, dim in enumerate(tensor.shape):
            if isinstance(dim, str):
                sizes.setdefault(dim, (int(example.shape[axis]), f"{tensor.name}[{axis}]"))
    return sizes


def _suspects(sizes: Mapping[str, tuple[int, str]]) -> dict[int, str]:
    """Example sizes of 2 or more, and products of two, by value: the axes they come from."""
    singles = [(v, where) for v, where in sizes.values() if v >= 2]
    found = {v: f"size of {where}" for v, where in singles}
    for (a, wa), (b, wb) in ((x, y) for i, x in enumerate(singles) for y in singles[i + 1 :]):
        found.setdefault(a * b, f"{wa} * {wb}")
    return found


def _constants(value: ir.Value | None) -> list[int]:
    if value is None:
        return []
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None:
        return []
    array = tensor.numpy()
    if array.dtype.kind not in "iu" or array.size > 16:
        return []
    return [int(v) for v in np.asarray(array).ravel()]


def _nodes(graph: ir.Graph) -> Iterator[ir.Node]:
    yield from graph.all_nodes()


def held_example_sizes(model: ir.Model, sizes: Mapping[str, tuple[int, str]]) -> list[HeldSize]:
    """The nodes holding an example size (2 or more) of a dynamic axis in a shape position."""
    suspects = _suspects(sizes)
    if not suspects:
        return []
    held = []
    for node in _nodes(model.graph):
        for index in _SHAPE_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ():
            value = node.inputs[index] if index < len(node.inputs) else None
            for constant in _constants(value):
                if abs(constant) in suspects:
                    where = node.metadata_props.get("pkg.onnx_export.source", "")
                    held.append(
                        HeldSize(
                            str(node.name), node.op_type, constant, suspects[abs(constant)], where
                        )
                    )
                    break
    return held


def _leaves(value: Any) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(value)
    return [torch.as_tensor(v).cpu() for v in leaves if isinstance(v, torch.Tensor | np.ndarray)]


def _error(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float | None:
    """Worst error in units of the tolerance (1 is at the edge); inf for another shape."""
    if len(got) != len(want):
        return None
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        if a.shape != b.shape:
            return math.inf
        if not b.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(a.to(b.dtype), b) else math.inf)
            continue
        worst = max(worst, tolerance_units(a, b))
    return worst


def _eager(call: Call) -> list[torch.Tensor] | None:
    """The model's output tensors on a copy of the call's inputs (:func:`_eager_output`)."""
    out = _eager_output(call)
    return None if out is None else [t.detach() for t in _leaves(out)]


def _eager_output(call: Call) -> Any:
    """The model's outputs on a copy of the call's inputs; the caller's RNG left as it was.

    A module in training mode runs as a copy: its running statistics (BatchNorm) stay
    as they were. In eval mode, buffers the forward updates in place (a running mean, a
    counter) are put back afterwards: checking a model does not change it, and the next
    check (the parity check at the example) starts from the state the file holds. No
    autograd graph is recorded (the outputs are compared, not differentiated): a user
    exporting with grad mode on does not pay for one.
    """
    try:
        args, kwargs = copy.deepcopy((call.args, call.kwargs))  # forward may change them
        training = any(m.training for m in call.module.modules())
        module = copy.deepcopy(call.module) if training else call.module
        buffers = {} if training else dict(module.named_buffers())
        with torch.random.fork_rng(devices=[]), torch.no_grad(), kept(buffers):
            out = module(*args, **kwargs)
    except Exception:  # the model refuses those sizes itself: nothing to prove there
        return None
    return out


def right_at_example(run: Any, call: Call) -> bool:
    """Whether the file runs at the example and matches eager there (else nothing to prove)."""
    want = _eager(call)
    if want is None:
        return False
    try:
        first = _error(_leaves(run(*call.args, **call.kwargs)), want)
    except Exception:  # wrong at the example already: the parity check's business
        return False
    return first is not None and first <= 1


def second_size_problem(run: Any, call: Call, second: Resized) -> str | None:
    """Run the file (``run``: the ONNX program's call) at the example and at ``second``.

    Returns what went wrong at the second size (its sizes named) when the file is right at
    the example but fails or differs from eager at the second size; ``None`` when it serves
    them, or when nothing can be proved (the model refuses the second size in eager, the
    file is already off at the example, the second size is outside a range it declares).
    """
    try:
        return _second_size_problem(run, call, second)
    except Exception:  # a check never breaks an export: no verdict
        return None


def _second_size_problem(run: Any, call: Call, second: Resized) -> str | None:
    # The second size first: a file that serves it (the usual case) needs no run at the
    # example here (the parity check runs it there). Only a failure or a difference at the
    # second size asks whether the file is right at the example, which makes it this
    # check's verdict (and not the parity check's).
    out = _eager_output(second.call)
    if out is None:
        return None
    want = [t.detach() for t in _leaves(out)]
    shapes = second.text()
    try:
        got = _leaves(run(*second.call.args, **second.call.kwargs))
    except InputError:
        return None  # a range the file declares: it tells the truth
    except Exception as e:
        if not right_at_example(run, call):
            return None
        text = (str(e).strip().splitlines() or [""])[0]
        return f"at {shapes} ONNX Runtime failed: {type(e).__name__}: {text[:300]}"
    error = _error(got, want)
    if error is not None and error <= 10:
        _lend_outputs(run, call, second, out)
    if error is None or error <= 10 or not right_at_example(run, call):
        return None
    what = "another shape" if math.isinf(error) else f"{error:.3g}x the tolerance"
    return f"at {shapes} the outputs differ from PyTorch's ({what})"


def _lend_outputs(run: Any, call: Call, second: Resized, out: Any) -> None:
    """Lend eager's outputs at ``second`` to the parity check at the example, where they hold it.

    The second size repeats the example's values along every axis it grows (the example
    leads each grown axis), so a model whose rows do not mix gives the example's outputs
    as the leading slice of these: the parity check compares ONNX Runtime's outputs at
    the example with that slice and runs eager at the example only when they differ
    (:meth:`ONNXProgram._from_second_size`). Not lent:

    - when a dynamic axis of the example is 1: such an example is traced size-obliviously
      (the file takes the branches of other sizes), and eager at 1 may take its own
      (``x.squeeze()`` drops the batch): only eager at the example can tell;
    - when an axis shrank (the example is not a slice of the second size);
    - when a module is in training mode (this run used training mode; the parity check's
      reference is eval mode).
    """
    if not isinstance(run, ONNXProgram) or call.size_one:
        return
    if any(old < 2 or new <= old for *_, old, new in second.sizes) or _oblivious(run):
        return
    if any(m.training for m in call.module.modules()):
        return
    run._lend_eager(EagerAtSecondSize((call.args, call.kwargs), out))


def _oblivious(program: ONNXProgram) -> bool:
    """Whether a capture attempt traced size-obliviously (a repair for a size-1 dimension)."""
    return any("size-obliviously" in fix for a in program.capture_attempts for fix in a.shape_fixes)


def declared_ranges(
    spec: AdapterSpec | None, widen: bool = False
) -> dict[tuple[str, int], tuple[int, float]]:
    """``(input, axis) -> (low, high)`` of the user's and the model's ranges (for second sizes).

    Ranges torch gave for no reason of the model's (:func:`narrowed_range`) are left out:
    they are what another capture may widen. With ``widen``, so are the model's caps at 2
    or below (:func:`capped_range`): the capture again is at sizes past them.
    """
    found: dict[tuple[str, int], tuple[int, float]] = {}
    for leaf in spec.inputs if spec is not None else ():
        for bounds in leaf.tensor.axis_ranges if leaf.tensor is not None else ():
            if bounds.origin == TORCH_RANGE or (widen and capped(bounds)):
                continue
            high = math.inf if bounds.high is None else bounds.high
            key = (leaf.tensor.name, bounds.axis)  # type: ignore[union-attr]  # a tensor leaf
            # One axis may hold several ranges (a lower bound, a multiple): their meet.
            low0, high0 = found.get(key, (0, math.inf))
            found[key] = (max(low0, bounds.low or 0), min(high0, high))
    return found


#: How a range's origin starts when a guard of the model's code set it.
_MODEL_CODE = "the model's code"


def declared_multiples(spec: AdapterSpec | None) -> dict[tuple[str, int], int]:
    """``(input, axis) -> n`` of the axes the file refuses at sizes that are not multiples of n.

    A second size off the multiple is refused by the file (``InputShapeError``) and proves
    nothing: the check's sizes are taken on it (a patch size of 4: 12, not 13).
    """
    found: dict[tuple[str, int], int] = {}
    for leaf in spec.inputs if spec is not None else ():
        for bounds in leaf.tensor.axis_ranges if leaf.tensor is not None else ():
            if bounds.multiple_of:
                key = (leaf.tensor.name, bounds.axis)  # type: ignore[union-attr]  # a tensor leaf
                found[key] = math.lcm(found.get(key, 1), bounds.multiple_of)
    return found


def capped(bounds: AxisRange) -> bool:
    """A range the model's code caps at 2 or below (a size-1 example's ``is_causal``)."""
    return (
        bounds.origin.startswith(_MODEL_CODE)
        and bounds.high is not None
        and bounds.high <= 2
        and (bounds.low or 0) <= 1
    )


def capped_range(spec: AdapterSpec | None) -> str | None:
    """A dynamic axis the model's code caps at 2 or below: what a size-1 example makes.

    ``is_causal = q_length > 1 and ...`` traced at one token bounds the tokens to 1 though
    both outcomes agree there; a capture at other sizes may serve every size (it is kept
    only where it is right at the example and at a third size).
    """
    for leaf in spec.inputs if spec is not None else ():
        for bounds in leaf.tensor.axis_ranges if leaf.tensor is not None else ():
            if capped(bounds):
                where = f"{leaf.tensor.name}[{bounds.axis}]"  # type: ignore[union-attr]  # a tensor leaf
                return f"{bounds.origin} bounds {where} to {bounds.text()} at the example's sizes"
    return None


def narrowed(bounds: AxisRange) -> bool:
    """An upper bound torch gave the captured program with no reason of the model's."""
    return bounds.origin == TORCH_RANGE and bounds.high is not None


def narrowed_range(spec: AdapterSpec | None) -> str | None:
    """A dynamic axis torch bounded above with no guard of the model's or bound of the user's.

    That happens when the example's sizes are special (a size-1 example traced
    size-obliviously kept the size-1 path: ``[1, 2]``); other example sizes may not.
    """
    for leaf in spec.inputs if spec is not None else ():
        for bounds in leaf.tensor.axis_ranges if leaf.tensor is not None else ():
            if narrowed(bounds):
                where = f"{leaf.tensor.name}[{bounds.axis}]"  # type: ignore[union-attr]  # a tensor leaf
                return (
                    f"torch.export bounded {where} to {bounds.text()} at the example's sizes, "
                    "with no guard in the model's code or bound of yours that says so"
                )
    return None


def unserved_axes_error(problem: str, held: Sequence[HeldSize]) -> ConversionError:
    """The error of a file that cannot serve the dynamic axes it would declare."""
    nodes = "".join(f"\n  - {h}" for h in held[:5])
    holding = f" Nodes that hold the example's sizes:{nodes}" if held else ""
    return ConversionError(
        f"The exported graph declares dynamic axes it cannot serve: {problem}, and capturing "
        f"again at other example sizes did not help.{holding}\nNext steps: export with an "
        "example whose dynamic sizes are 2 or more and differ from the model's other sizes; "
        "or find the line above that turns a size into a constant (a Python int from "
        "x.shape in a computation torch.export cannot follow) and keep it a tensor size; or "
        "leave those axes static."
    )
