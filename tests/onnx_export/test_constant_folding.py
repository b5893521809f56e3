"""Constant computations are folded, with ONNX's semantics, and quietly (#22)."""

from __future__ import annotations

import collections

import onnx_ir as ir
import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close


class _GatherBuffer(torch.nn.Module):
    """BERT's ``token_type_ids``: a constant buffer gathered at constant positions."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(width * 2.0).reshape(2, width), False)
        positions = torch.arange(8).flip(0).expand(2, 8).clone()
        self.register_buffer("positions", positions, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.gather(self.table, 1, self.positions)


@pytest.mark.parametrize("width", [8, 64], ids=["narrow", "past_np_choose_limit"])
def test_a_constant_gather_elements_is_folded_without_a_logged_failure(
    width: int, capfd: pytest.CaptureFixture[str]
) -> None:
    model, x = _GatherBuffer(width), torch.randn(2, 8)
    program = onnx_export.dynamo_export(model, x)
    assert capfd.readouterr() == ("", "")  # nothing on the terminal
    ops = collections.Counter(node.op_type for node in program.model.graph)
    assert ops["GatherElements"] == 0
    assert ops["Add"] == 1
    messages = [d.message for d in program.diagnostic_context.diagnostics]
    assert not [m for m in messages if "Evaluation failed" in m]
    assert_onnx_program_close(program, model, x)


def test_the_folder_infers_only_what_translation_left_unknown() -> None:
    # Named symbolic dims (torch's) are as much as ONNX's inference could find; with
    # dynamic axes nearly every node has them, and inferring them again cost half the
    # optimizer (#39). A dim without a name, or no dtype, is still inferred.
    from onnx_export.passes.optimize import _known

    def value(dims: list[object] | None, typed: bool = True) -> ir.Value:
        shape = None if dims is None else ir.Shape(dims)
        kind = ir.TensorType(ir.DataType.FLOAT) if typed else None
        return ir.Value(type=kind, shape=shape)

    assert _known(value([2, 3]))
    assert _known(value(["batch", 16, "2*s0"]))
    assert not _known(value([ir.SymbolicDim(None), 16]))
    assert not _known(value(None))
    assert not _known(value([2, 3], typed=False))


class _Rows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.reshape(x.shape[0], 4, -1) * 2).flatten(1).softmax(-1)


def test_a_dynamic_graph_keeps_its_named_dims_through_the_optimizer() -> None:
    model, x = _Rows(), torch.randn(3, 8)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert [str(v.shape) for v in program.model.graph.outputs] == ["[batch,8]"]
    for rows in (1, 3, 6):
        assert_onnx_program_close(program, model, torch.randn(rows, 8))
