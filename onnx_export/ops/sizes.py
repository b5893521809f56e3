"""Sizes as SymInts: ``sym_size``, ``sym_numel``, ``sym_stride``, ``sym_storage_offset``.

The functions live with the rest of the SymInt arithmetic (``onnx_export._symbolic``);
registering them here makes the registry know these ATen ops, so that a graph using them
needs no decomposition. ``sym_size.int`` replaces torchlib's, which slices the wrong
dimension for a negative ``dim``.
"""

from __future__ import annotations

from onnx_export._symbolic import (
    aten_sym_numel,
    aten_sym_size,
    aten_sym_storage_offset,
    aten_sym_stride,
)
from onnx_export.ops._registration import onnx_op

__all__ = ["aten_sym_numel", "aten_sym_size", "aten_sym_storage_offset", "aten_sym_stride"]

onnx_op("aten::sym_size.int")(aten_sym_size)
onnx_op("aten::sym_numel")(aten_sym_numel)
onnx_op("aten::sym_stride.int")(aten_sym_stride)
onnx_op("aten::sym_storage_offset")(aten_sym_storage_offset)
