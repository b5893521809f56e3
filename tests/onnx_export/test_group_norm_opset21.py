"""``group_norm`` is one ``GroupNormalization`` node at opset 21 and later.

Opset 21's ``GroupNormalization`` takes one scale and one bias per channel, as torch does;
below 21 the decomposition through ``InstanceNormalization`` is kept. Every case runs in
ONNX Runtime and is compared with eager PyTorch.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import export_and_check


class Functional(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.group_norm(x, 4)


def _affine(groups: int, channels: int) -> nn.GroupNorm:
    norm = nn.GroupNorm(groups, channels, eps=1e-3)
    with torch.no_grad():  # per-channel values, so a per-group reading would differ
        norm.weight.copy_(torch.randn(channels))
        norm.bias.copy_(torch.randn(channels))
    return norm


_CASES = [
    pytest.param(Functional, (1, 4, 4, 4), id="functional_no_affine"),
    pytest.param(lambda: _affine(2, 6), (2, 6, 5, 3), id="module_affine_2d"),
    pytest.param(lambda: _affine(3, 6), (2, 6, 7), id="module_affine_1d"),
]


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize(("make", "shape"), _CASES)
def test_group_norm_is_one_node_at_opset_21(
    make: object, shape: tuple[int, ...], opset: int
) -> None:
    model = make()  # type: ignore[operator]
    options = onnx_export.ExportOptions(opset_version=opset)
    program = export_and_check(model, torch.randn(*shape), options=options)
    assert [n.op_type for n in program.model.graph] == ["GroupNormalization"]


def test_group_norm_below_opset_21_is_decomposed() -> None:
    options = onnx_export.ExportOptions(opset_version=20)
    program = export_and_check(_affine(2, 6), torch.randn(2, 6, 5, 3), options=options)
    ops = [n.op_type for n in program.model.graph]
    assert "GroupNormalization" not in ops and "InstanceNormalization" in ops


def test_group_norm_keeps_a_dynamic_batch_and_half_precision() -> None:
    model = _affine(2, 4).half()
    options = onnx_export.ExportOptions(opset_version=21, dynamic_shapes={"input": {0: "batch"}})
    x = torch.randn(3, 4, 5, 5, dtype=torch.float16)
    program = export_and_check(model, x, options=options, rtol=1e-2, atol=1e-2)
    assert program.model.graph.inputs[0].shape[0] == "batch"
    assert [n.op_type for n in program.model.graph] == ["GroupNormalization"]
