"""``einsum`` whose output has a data-dependent size, kept away from ONNX Runtime's crash.

ONNX Runtime 1.32's ``Einsum`` kills the process (SIGFPE, a division by zero) on some
equations when an output axis is empty: ``blhd,bshd->blhs`` with ``s == 0`` (Longformer's
scores against its global keys when no token is global), while ``bhld,bhsd->bhls`` with
the same sizes works. A size that comes from the data (an unbacked size: the number of
``nonzero()`` rows, a ``max()`` used as a size) can be zero at run time though the
example's was not.

Here each letter of the output whose size torch.export knows only from the data is
padded by one (zeros, at the end) in every operand that holds it, and the output is
sliced back to the true size on that axis. The padding only reaches output entries that
are sliced off (the letter is not summed over), so the kept entries are ``Einsum``'s
own. Every other ``einsum`` is ONNX's ``Einsum``, as torchlib writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from onnx_export.ops._common import _fx_node, ints, op
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_einsum"]


def _operand_shapes() -> list[Sequence[Any]] | None:
    """The shapes torch gives the current ``einsum`` node's operands, when known."""
    node = _fx_node()
    if node is None or len(node.args) < 2 or not isinstance(node.args[1], (list, tuple)):
        return None
    shapes: list[Sequence[Any]] = []
    for arg in node.args[1]:
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None
        shapes.append(val.shape)
    return shapes


def _data_sized_output_letters(terms: list[str], output: str) -> set[str]:
    """Letters of ``output`` whose size, in some operand, is known only from the data."""
    shapes = _operand_shapes()
    if shapes is None or len(shapes) != len(terms):
        return set()
    found = set()
    for term, shape in zip(terms, shapes, strict=True):
        if len(term) != len(shape):
            return set()
        for letter, size in zip(term, shape, strict=True):
            if letter in output and isinstance(size, torch.SymInt) and free_unbacked_symbols(size):
                found.add(letter)
    return found


@onnx_op("aten::einsum")
def aten_einsum(
    equation: str, tensors: Sequence[ir.Value], path: Sequence[int] | None = None
) -> ir.Value:
    """einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor."""
    compact = equation.replace(" ", "")
    if "->" not in compact or "." in compact:
        return op.Einsum(*tensors, equation=equation)
    inputs, output = compact.split("->")
    terms = inputs.split(",")
    padded = _data_sized_output_letters(terms, output)
    if not padded:
        return op.Einsum(*tensors, equation=equation)
    operands = []
    for term, tensor in zip(terms, tensors, strict=True):
        axes = [axis for axis, letter in enumerate(term) if letter in padded]
        pads = [0] * len(axes) + [1] * len(axes)
        operands.append(op.Pad(tensor, ints(pads), None, ints(axes)) if axes else tensor)
    result = op.Einsum(*operands, equation=compact)
    for axis, letter in enumerate(output):
        if letter not in padded:
            continue
        term, tensor = next((t, x) for t, x in zip(terms, tensors, strict=True) if letter in t)
        source = term.index(letter)
        size = op.Shape(tensor, start=source, end=source + 1)
        result = op.Slice(result, ints([0]), size, ints([axis]))
    return result
