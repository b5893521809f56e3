"""The clean-up pass after the optimizer removes identity reshapes, and only those."""

from __future__ import annotations

import torch

import onnx_export
from tests.helpers import assert_onnx_program_close


class ReshapeToSame(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x * 2).reshape(x.shape[0], -1, x.shape[2])  # same shape: an identity
        return y.reshape(x.shape[0], -1) + 1  # a real reshape


def _reshapes(program: onnx_export.ONNXProgram) -> int:
    return sum(node.op_type == "Reshape" for node in program.model.graph)


def test_identity_reshape_is_removed_and_results_match() -> None:
    x = torch.randn(2, 3, 4)
    program = onnx_export.dynamo_export(ReshapeToSame(), x)
    assert _reshapes(program) == 1
    assert_onnx_program_close(program, ReshapeToSame(), x)


def test_dynamic_shapes_keep_their_reshapes() -> None:
    x = torch.randn(2, 3, 4)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(ReshapeToSame(), x, export_options=options)
    assert_onnx_program_close(program, ReshapeToSame(), torch.randn(5, 3, 4))


def test_unoptimized_export_keeps_every_reshape() -> None:
    x = torch.randn(2, 3, 4)
    options = onnx_export.ExportOptions(optimize=False)
    program = onnx_export.dynamo_export(ReshapeToSame(), x, export_options=options)
    assert _reshapes(program) == 2
    assert_onnx_program_close(program, ReshapeToSame(), x)
