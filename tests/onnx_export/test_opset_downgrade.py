"""Opsets 16 and 17: what the conversion does, and what it refuses before reading weights."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class _Norm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def test_layer_norm_in_float64_at_opset_16_keeps_its_dtype() -> None:
    torch.manual_seed(0)
    model, x = _Norm().double().eval(), torch.randn(2, 8, dtype=torch.float64)
    options = onnx_export.ExportOptions(opset_version=16)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert_onnx_program_close(program, model, x)


class _BranchMean(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(
            x.sum() > 0, lambda t: t - t.mean(-1, keepdim=True), lambda t: t * 2, (x,)
        )


@pytest.mark.parametrize("opset", [13, 17])
def test_reductions_in_control_flow_bodies_are_converted(opset: int) -> None:
    options = onnx_export.ExportOptions(opset_version=opset)
    program = onnx_export.dynamo_export(_BranchMean(), torch.randn(2, 4), export_options=options)
    assert program.model.opset_imports[""] == opset
    for x in (torch.rand(2, 4), -torch.rand(2, 4)):  # both branches
        assert_onnx_program_close(program, _BranchMean(), x)


def test_a_fake_export_at_opset_15_is_converted_without_reading_weights(tmp_path: Path) -> None:
    with onnx_export.enable_fake_mode():
        model = _Norm()
    x = torch.randn(2, 8)
    options = onnx_export.ExportOptions(opset_version=15)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert program.model.opset_imports[""] == 15
    torch.manual_seed(0)
    real = _Norm().eval()
    program.save(tmp_path / "m.onnx", model_state=real.state_dict())
    loaded = onnx.load(tmp_path / "m.onnx")
    onnx.checker.check_model(loaded, full_check=True)
    assert [o.version for o in loaded.opset_import if o.domain in ("", "ai.onnx")] == [15]
    assert "LayerNormalization" not in {n.op_type for n in loaded.graph.node}
    got = onnx_export.load(tmp_path / "m.onnx")(x)
    torch.testing.assert_close(torch.as_tensor(got), real(x).detach(), rtol=1e-4, atol=1e-5)


class _TwoInTwoOut(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x * y


@pytest.mark.parametrize(
    "names",
    [{"input_names": ["y"]}, {"output_names": ["x"]}],
    ids=["input-named-like-another-input", "output-named-like-an-input"],
)
def test_names_that_another_input_or_output_has_are_refused(names: dict[str, list[str]]) -> None:
    options = onnx_export.ExportOptions(**names)
    with pytest.raises(onnx_export.ExportInputError, match="already name other graph inputs"):
        onnx_export.dynamo_export(
            _TwoInTwoOut(), torch.randn(2), torch.randn(2), export_options=options
        )


def test_swapped_input_names_are_fine() -> None:
    model, x, y = _TwoInTwoOut(), torch.randn(2), torch.randn(2)
    options = onnx_export.ExportOptions(input_names=["y", "x"])
    program = onnx_export.dynamo_export(model, x, y, export_options=options)
    assert [v.name for v in program.model.graph.inputs] == ["y", "x"]
    assert_onnx_program_close(program, model, x, y)
