"""onnx-export: export PyTorch models to ONNX through torch.export and onnxscript's torchlib.

Example:
    >>> import torch, onnx_export
    >>> program = onnx_export.dynamo_export(torch.nn.Linear(3, 2), torch.randn(1, 3))
    >>> len(program.model.graph.inputs)
    1
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from onnx_export.errors import (
    CaptureError,
    ConversionError,
    ExportInputError,
    InvalidGraphError,
    OnnxExportError,
    OptimizationError,
    SerializationError,
    UnsupportedOpsError,
    VerificationError,
)

if TYPE_CHECKING:
    from onnx_export._export import dynamo_export
    from onnx_export._fake import enable_fake_mode
    from onnx_export._options import ExportOptions
    from onnx_export._registry import OnnxFunctionEntry, OnnxRegistry, target_name
    from onnx_export.adapters import load
    from onnx_export.capture._strategies import CaptureAttempt
    from onnx_export.program._program import ONNXProgram
    from onnx_export.program._verify import NodeMismatch, OutputComparison, VerificationResult

__version__ = "0.1.0"

#: What ``pip install 'onnx-export[export]'`` adds; a lazy import that lacks one names the extra.
_EXPORT_EXTRA_MODULES = ("torch", "onnxscript", "onnx_ir")

# Everything that needs torch is imported on first use, so that a deployment can
# ``onnx_export.load(...)`` a saved model in a process without torch.
_LAZY = {
    "load": "onnx_export.adapters",
    "CaptureAttempt": "onnx_export.capture._strategies",
    "dynamo_export": "onnx_export._export",
    "enable_fake_mode": "onnx_export._fake",
    "ExportOptions": "onnx_export._options",
    "ONNXProgram": "onnx_export.program._program",
    "OnnxFunctionEntry": "onnx_export._registry",
    "OnnxRegistry": "onnx_export._registry",
    "target_name": "onnx_export._registry",
    "NodeMismatch": "onnx_export.program._verify",
    "OutputComparison": "onnx_export.program._verify",
    "VerificationResult": "onnx_export.program._verify",
    "EnvironmentReport": "onnx_export._environment",
    "check_environment": "onnx_export._environment",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'onnx_export' has no attribute {name!r}")
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] not in _EXPORT_EXTRA_MODULES:
            raise
        raise ModuleNotFoundError(
            f"onnx_export.{name} needs torch, onnxscript and onnx-ir, the 'export' extra "
            f"({e.name} is not installed): pip install 'onnx-export[export]'. Without them, "
            "onnx_export.load runs saved models.",
            name=e.name,
        ) from e
    value = getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # Exporting
    "dynamo_export",
    "ExportOptions",
    "ONNXProgram",
    "CaptureAttempt",
    "enable_fake_mode",
    # Running a saved model (numpy and onnxruntime only; no torch needed)
    "load",
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
    "InvalidGraphError",
    # Verification results
    "VerificationResult",
    "OutputComparison",
    "NodeMismatch",
    # The installation
    "check_environment",
    "EnvironmentReport",
]
