"""``roll`` with shifts that may be symbolic (``torch.roll(x, x.shape[0] // 2, 0)``).

Torchlib's ``aten_roll`` passes the shifts as attributes, so a shift computed from a
dynamic size fails ("Unsupported attribute type: list"). Here each shift is a value:
the result is the last ``shift mod size`` items followed by the rest, two ``Slice`` and a
``Concat`` per rolled axis, for any size (zero included) and any sign of the shift.
Complex tensors roll as their real view (trailing axis of 2 kept in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import int64_1d, ints, known_rank, op, unsupported
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_roll", "aten_roll_complex"]

_BIG = 2**62


def _roll_axis(x: ir.Value, shift: Any, axis: int) -> ir.Value:
    if isinstance(shift, int) and not isinstance(shift, bool) and shift == 0:
        return x
    size = op.Shape(x, start=axis, end=axis + 1)
    # Python's modulo (the divisor's sign); an empty axis rolls by 0 (no division by 0).
    kept = op.Mod(int64_1d(shift), op.Max(size, ints([1])))
    split = op.Sub(size, kept)
    axes = ints([axis])
    tail = op.Slice(x, split, ints([_BIG]), axes)
    head = op.Slice(x, ints([0]), split, axes)
    return op.Concat(tail, head, axis=axis)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _roll(self: ir.Value, shifts: Any, dims: Any, data_rank: int) -> ir.Value:
    shift_list, dim_list = _as_list(shifts), _as_list(dims) if dims is not None else []
    if not dim_list:
        if len(shift_list) != 1:
            raise unsupported("one shift when dims is empty", f"{len(shift_list)} shifts")
        trailing = known_rank(self) - data_rank  # the complex view's axis of 2, if any
        flat = op.Reshape(self, ints([-1] + [2] * trailing))
        return op.Reshape(_roll_axis(flat, shift_list[0], 0), op.Shape(self))
    if len(shift_list) != len(dim_list):
        raise unsupported(
            "as many shifts as dims", f"{len(shift_list)} shifts and {len(dim_list)} dims"
        )
    result = self
    for shift, dim in zip(shift_list, dim_list, strict=True):
        result = _roll_axis(result, shift, int(dim) % data_rank if data_rank else 0)
    return result


@onnx_op("aten::roll")
def aten_roll(self: ir.Value, shifts: Sequence[Any], dims: Sequence[int] = ()) -> ir.Value:
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor (symbolic shifts too)."""
    r = known_rank(self)
    if r == 0:
        return op.Identity(self)
    return _roll(self, shifts, dims, r)


@onnx_op("aten::roll", complex=True)
def aten_roll_complex(self: ir.Value, shifts: Sequence[Any], dims: Sequence[int] = ()) -> ir.Value:
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor, on the real view."""
    r = known_rank(self) - 1
    if r == 0:
        return op.Identity(self)
    return _roll(self, shifts, dims, r)
