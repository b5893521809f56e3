"""``as_strided`` of a view whose memory is not in row-major order (Longformer's chunks).

``as_strided(size, stride, offset)`` reads the input's storage: ``stride`` counts elements
of memory, not of the input's row-major order. ONNX has values, not memory, so torchlib
flattens the input in row-major order and gathers from it, which is right only when the
input is contiguous. A transposed view is not: Longformer reshapes ``query.transpose(1,
2)`` into ``[batch * heads, seq, dim]`` (a view, strides ``(dim, batch*heads*dim, 1)``) and
then makes overlapping chunks of it with ``as_strided``; the row-major reading gathers
the wrong rows (both exporters were 4e-3 off on a tiny model).

When torch's record of the input (its FX value) shows a dense layout in another order (a
permutation of the axes makes it contiguous), the input is first transposed into memory
order, so that its row-major flattening is its storage, and the offset is taken relative
to the input's own. Any other input (contiguous, a slice with gaps, symbolic strides) is
torchlib's ``as_strided`` as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from onnx_export.ops._common import fx_input, op
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_as_strided", "memory_order"]


def _hint(size: Any) -> int | None:
    """An int, or the example's value of a symbolic size (``None`` without one)."""
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return hint if isinstance(hint, int) else None


def memory_order(value: Any) -> list[int] | None:
    """The order of axes that makes ``value`` (an FX tensor value) contiguous, if not its own.

    From the largest stride to the smallest (as the example's sizes have them; symbolic
    strides must then equal the contiguous ones for every size); ``None`` when the layout
    is already contiguous, overlaps, has gaps, or cannot be decided.
    """
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    sizes, strides = list(value.shape), list(value.stride())
    size_hints, stride_hints = [_hint(n) for n in sizes], [_hint(n) for n in strides]
    if None in size_hints or None in stride_hints:
        return None
    # size-1 axes may have any stride: they go last, where they do not break the order
    long = [a for a in range(len(sizes)) if size_hints[a] != 1]
    long.sort(key=lambda a: (-(stride_hints[a] or 0), a))
    order = long + [a for a in range(len(sizes)) if size_hints[a] == 1]
    expected: Any = 1
    for axis in reversed(long):
        if not statically_known_true(strides[axis] == expected):
            return None  # overlapping, gaps, or not so for every size
        expected = expected * sizes[axis]
    return None if order == list(range(len(sizes))) else order


@onnx_op("aten::as_strided")
def aten_as_strided(
    self: ir.Value,
    size: Sequence[Any],
    stride: Sequence[Any],
    storage_offset: Any = None,
) -> ir.Value:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None)."""
    from onnxscript.function_libs.torch_lib.ops.core import (
        aten_as_strided as torchlib_as_strided,
    )

    value = fx_input(0)
    order = memory_order(value)
    if order is not None:
        # the input's storage starts at its own offset: its transposed flattening is it
        own = value.storage_offset()
        if statically_known_true(own == 0):
            self = op.Transpose(self, perm=order)
        elif isinstance(own, int) and isinstance(storage_offset or 0, int):
            self = op.Transpose(self, perm=order)
            storage_offset = (storage_offset or 0) - own
    result: ir.Value = torchlib_as_strided(self, size, stride, storage_offset)
    return result
