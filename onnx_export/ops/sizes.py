"""Sizes as SymInts: ``sym_size``, ``sym_numel``, ``sym_stride``, ``sym_storage_offset``.

The SymInt arithmetic of the translation stage (``translation/_symbolic.py``) uses them
too; registering them here makes the registry know these ATen ops, so that a graph using
them needs no decomposition. ``sym_size.int`` replaces torchlib's, which slices the wrong
dimension for a negative ``dim``.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

from onnx_export.ops._common import fx_input, op
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_sym_numel", "aten_sym_size", "aten_sym_storage_offset", "aten_sym_stride"]


def _value(x: int) -> Any:
    return op.Constant(value=ir.tensor(x, dtype=ir.DataType.INT64))


def _rank(x: ir.Value) -> int:
    val = fx_input(0)
    if isinstance(val, torch.Tensor):
        return val.dim()
    if x.shape is None:
        raise ValueError("the rank of the input is unknown")
    return len(x.shape)


def aten_sym_size(self: ir.Value, dim: int = 0) -> Any:
    """``aten::sym_size.int``: one dimension as an INT64 scalar (negative ``dim`` too)."""
    dim = dim % _rank(self) if _rank(self) else 0
    return op.Squeeze(op.Shape(self, start=dim, end=dim + 1), op.Constant(value_ints=[0]))


def _sizes(self: ir.Value) -> Any:
    """The shape (of a complex tensor: without its real view's trailing 2)."""
    return op.Shape(self, start=0, end=_rank(self)) if _rank(self) else op.Shape(self)


def aten_sym_numel(self: ir.Value) -> Any:
    """``aten::sym_numel``: the number of elements."""
    if not _rank(self):
        return _value(1)
    return op.ReduceProd(_sizes(self), keepdims=0)


def aten_sym_stride(self: ir.Value, dim: int = 0) -> Any:
    """``aten::sym_stride.int`` of a contiguous tensor (ONNX tensors have no strides)."""
    rank = _rank(self)
    dim = dim % rank if rank else 0
    if dim + 1 >= rank:
        return _value(1)
    after = op.Shape(self, start=dim + 1, end=rank)
    return op.ReduceProd(after, keepdims=0)


def aten_sym_storage_offset(self: ir.Value) -> Any:
    """``aten::sym_storage_offset``: 0 (ONNX tensors are never views)."""
    return _value(0)


onnx_op("aten::sym_size.int")(aten_sym_size)
onnx_op("aten::sym_numel")(aten_sym_numel)
onnx_op("aten::sym_stride.int")(aten_sym_stride)
onnx_op("aten::sym_storage_offset")(aten_sym_storage_offset)
