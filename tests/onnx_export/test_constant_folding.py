"""Constant computations are folded, with ONNX's semantics, and quietly (#22)."""

from __future__ import annotations

import collections

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
