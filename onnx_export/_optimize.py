"""Optimization and opset conversion of the translated model."""

from __future__ import annotations

import onnx_ir as ir
import onnxscript.optimizer
import onnxscript.version_converter

__all__ = ["optimize_model", "convert_opset"]


def optimize_model(model: ir.Model) -> tuple[int, int]:
    """Run onnxscript's optimizer in place; return node counts before and after."""
    before = model.graph.num_nodes()
    onnxscript.optimizer.optimize(model)
    return before, model.graph.num_nodes()


def convert_opset(model: ir.Model, target: int) -> None:
    """Bring the model to ``target`` opset (torchlib builds at 18)."""
    if model.opset_imports.get("", target) != target:
        onnxscript.version_converter.convert_version(model, target)
    model.opset_imports[""] = target
    model.graph.opset_imports[""] = target
