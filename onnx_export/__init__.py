"""onnx-export: export PyTorch models to ONNX through torch.export and onnxscript's torchlib.

Example:
    >>> import torch, onnx_export
    >>> program = onnx_export.dynamo_export(torch.nn.Linear(3, 2), torch.randn(1, 3))
    >>> len(program.model.graph.inputs)
    1
"""

from __future__ import annotations

from onnx_export._capture import CaptureAttempt
from onnx_export._export import dynamo_export
from onnx_export._options import ExportOptions
from onnx_export._program import ONNXProgram
from onnx_export._registry import OnnxFunctionEntry, OnnxRegistry, target_name
from onnx_export._verify import NodeMismatch, OutputComparison, VerificationResult
from onnx_export.errors import (
    CaptureError,
    ConversionError,
    ExportInputError,
    OnnxExportError,
    OptimizationError,
    SerializationError,
    UnsupportedOpsError,
    VerificationError,
)

__version__ = "0.1.0"

__all__ = [
    # Exporting
    "dynamo_export",
    "ExportOptions",
    "ONNXProgram",
    "CaptureAttempt",
    # Custom ops
    "OnnxRegistry",
    "OnnxFunctionEntry",
    "target_name",
    # Errors
    "OnnxExportError",
    "ExportInputError",
    "CaptureError",
    "ConversionError",
    "UnsupportedOpsError",
    "OptimizationError",
    "SerializationError",
    "VerificationError",
    # Verification results
    "VerificationResult",
    "OutputComparison",
    "NodeMismatch",
]
