"""The graph passes that run on the ONNX model after translation, one pass per module.

- :mod:`~onnx_export.passes.optimize`: onnxscript's optimizer (constant folding, rewrite
  rules) with the model's weights shielded, and opset conversion.
- :mod:`~onnx_export.passes.cleanup`: nodes that provably do nothing (identity reshapes).
- :mod:`~onnx_export.passes.legalize`: bool data through ops ONNX Runtime has no bool kernel
  for.
- :mod:`~onnx_export.passes.fold_weights`: layout ops on weights (``fc.weight.T``) as
  lazily computed initializers.
- :mod:`~onnx_export.passes.fold_weight_graphs`: any computation on weights only (weight
  standardisation, scaled weights, position tables) as lazily computed initializers.
- :mod:`~onnx_export.passes.fold_batch_norm`: inference BatchNorm folded into the Conv
  before it.
- :mod:`~onnx_export.passes.gelu`: the exact and the tanh GELU as one ``Gelu`` node (opset 20+).
- :mod:`~onnx_export.passes.half_precision`: softmax and reductions of a half-precision
  export computed in float32 (``ExportOptions(dtype=...)``).
- :mod:`~onnx_export.passes.ort_fusions`: ONNX Runtime's fused ``com.microsoft`` ops
  (``ExportOptions(target="onnxruntime")``).
- :mod:`~onnx_export.passes.downgrade`: opsets 13 to 17, each changed op rewritten into its
  older form (the table is ``_older_forms``), run last by the pipeline.

A new pass is a new module here that exposes one function taking an ``ir.Model`` (and
returning what it changed), imported below and called from ``onnx_export._export``.
"""

from __future__ import annotations

from onnx_export.passes.cleanup import remove_identity_reshapes
from onnx_export.passes.fold_batch_norm import fold_batch_norm_into_conv
from onnx_export.passes.fold_weight_graphs import fold_weight_computations
from onnx_export.passes.fold_weights import fold_weight_transforms
from onnx_export.passes.gelu import fuse_gelu
from onnx_export.passes.half_precision import compute_in_float32
from onnx_export.passes.legalize import legalize_bool_data
from onnx_export.passes.optimize import convert_opset, optimize_model, weights_shielded
from onnx_export.passes.ort_fusions import fuse_for_onnxruntime

__all__ = [
    "compute_in_float32",
    "convert_opset",
    "fold_batch_norm_into_conv",
    "fold_weight_computations",
    "fold_weight_transforms",
    "fuse_for_onnxruntime",
    "fuse_gelu",
    "legalize_bool_data",
    "optimize_model",
    "remove_identity_reshapes",
    "weights_shielded",
]
