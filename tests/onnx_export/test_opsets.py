"""Opset versions: 18 (torchlib's own) and 23 (through the version converter)."""

from __future__ import annotations

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from tests.helpers import export_and_check


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(F.gelu(self.norm(self.linear(x))), dim=-1)


class OpsetSensitive(nn.Module):
    """Ops whose ONNX signatures changed after opset 18 (Split, Reduce*, Pad, Resize...)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.norm(self.conv(x))
        a, b = h.split(2, dim=1)
        return (
            F.pad(a, (1, 1)).mean(dim=(2, 3)),
            b.squeeze(0).unsqueeze(1).amax(-1),
            F.interpolate(h, scale_factor=2, mode="nearest"),
            h.flatten(1).reshape(-1, 4).sum(0),
        )


def _default_opset(proto: onnx.ModelProto) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    assert len(versions) == 1, proto.opset_import
    return versions[0]


@pytest.mark.parametrize("opset", [13, 18, 23], ids=["opset13", "opset18", "opset23"])
def test_small_model_at_opset(opset: int) -> None:
    torch.manual_seed(0)
    model = Small().eval()
    x = torch.randn(2, 5, 8)
    program = export_and_check(
        model, x, options=onnx_export.ExportOptions(opset_version=opset)
    )  # full checker + ORT run + comparison
    proto = program.model_proto
    assert _default_opset(proto) == opset
    assert program.model.opset_imports[""] == opset
    assert program.model.graph.opset_imports[""] == opset
    assert f"opset={opset}" in repr(program)
    ops = {node.op_type for node in proto.graph.node}
    assert "Softmax" in ops, ops
    assert ("LayerNormalization" in ops) == (opset >= 17), ops


@pytest.mark.parametrize("opset", [13, 14, 15, 16, 17, 18, 23], ids=lambda o: f"opset{o}")
def test_opset_sensitive_ops_convert(opset: int) -> None:
    torch.manual_seed(0)
    model = OpsetSensitive().eval()
    program = export_and_check(
        model, torch.randn(1, 4, 6, 6), options=onnx_export.ExportOptions(opset_version=opset)
    )
    assert _default_opset(program.model_proto) == opset


def test_default_opset_is_20() -> None:
    assert onnx_export.ExportOptions().opset_version == 20
    program = onnx_export.dynamo_export(Small().eval(), torch.randn(1, 8))
    assert _default_opset(program.model_proto) == 20


@pytest.mark.parametrize("opset", [12, 24], ids=["opset12", "opset24"])
def test_unsupported_opset_is_rejected(opset: int) -> None:
    # 13 to 17 are reached by rewriting the opset-18 model op by op.
    with pytest.raises(ValueError, match=f"between 13 and 23, got {opset}"):
        onnx_export.ExportOptions(opset_version=opset)
