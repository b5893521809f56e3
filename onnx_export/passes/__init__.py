"""The graph passes that run on the ONNX model after translation, one pass per module.

- :mod:`~onnx_export.passes.optimize`: onnxscript's optimizer (constant folding, rewrite
  rules) with the model's weights shielded, and opset conversion.
- :mod:`~onnx_export.passes.cleanup`: nodes that provably do nothing (identity reshapes).
- :mod:`~onnx_export.passes.legalize`: bool data through ops ONNX Runtime has no bool kernel
  for.

A new pass is a new module here that exposes one function taking an ``ir.Model`` (and
returning what it changed), imported below and called from ``onnx_export._export``.
"""

from __future__ import annotations

from onnx_export.passes.cleanup import remove_identity_reshapes
from onnx_export.passes.legalize import legalize_bool_data
from onnx_export.passes.optimize import convert_opset, optimize_model, weights_shielded

__all__ = [
    "convert_opset",
    "legalize_bool_data",
    "optimize_model",
    "remove_identity_reshapes",
    "weights_shielded",
]
