"""torch.onnx's options carried over: names, dynamic_axes, opsets 16/17, an ExportedProgram.

Also the capture errors: torch's explanation in the message and the SARIF report, and
next steps that match the cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx_ir as ir
import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.linear(x)
        return h * mask, h.sum(-1)


def _inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch, 4), torch.ones(batch, 3)


def _dims(value: ir.Value) -> list[Any]:
    assert value.shape is not None
    return [d.value if isinstance(d, ir.SymbolicDim) else d for d in value.shape]


def test_input_and_output_names_reach_graph_and_adapter(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Gate()
    options = onnx_export.ExportOptions(
        input_names=["features", "gate"], output_names=["gated", "total"]
    )
    program = onnx_export.dynamo_export(model, *_inputs(2), export_options=options)
    assert [v.name for v in program.model.graph.inputs] == ["features", "gate"]
    assert [v.name for v in program.model.graph.outputs] == ["gated", "total"]
    assert_onnx_program_close(program, model, *_inputs(2))
    program.save(tmp_path / "m.onnx")
    loaded = onnx_export.load(tmp_path / "m.onnx")
    x, mask = _inputs(2)
    gated, _total = loaded(x, mask=mask)  # still called as the PyTorch model is
    torch.testing.assert_close(gated, model(x, mask)[0].detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("axes", "name"),
    [
        pytest.param({"features": {0: "batch"}, "gate": {0: "batch"}}, "batch", id="dict"),
        pytest.param({"features": [0], "gate": [0], "gated": [0]}, None, id="list"),
    ],
)
def test_dynamic_axes_legacy_dict(axes: dict[str, Any], name: str | None) -> None:
    torch.manual_seed(0)
    model = Gate()
    options = onnx_export.ExportOptions(
        input_names=["features", "gate"], output_names=["gated", "total"], dynamic_axes=axes
    )
    program = onnx_export.dynamo_export(model, *_inputs(2), export_options=options)
    first = _dims(program.model.graph.inputs[0])[0]
    assert isinstance(first, str) and (name is None or first == name)
    for batch in (5, 1):
        assert_onnx_program_close(program, model, *_inputs(batch))


def test_dynamic_axes_without_input_names_use_parameter_names() -> None:
    model = Gate()
    options = onnx_export.ExportOptions(dynamic_axes={"x": {0: "n"}, "mask": {0: "n"}})
    program = onnx_export.dynamo_export(model, *_inputs(2), export_options=options)
    assert _dims(program.model.graph.inputs[1]) == ["n", 3]
    assert_onnx_program_close(program, model, *_inputs(4))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"input_names": ["a", "b", "c"]}, "has 3 names", id="too_many"),
        pytest.param({"output_names": ["o", "o"]}, "distinct", id="duplicate"),
        pytest.param({"dynamic_axes": {"nope": [0]}}, "'nope', which is not an input", id="axes"),
    ],
)
def test_bad_names_are_input_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(onnx_export.ExportInputError, match=message):
        onnx_export.dynamo_export(
            Gate(), *_inputs(2), export_options=onnx_export.ExportOptions(**options)
        )


def test_dynamic_axes_and_dynamic_shapes_together_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        onnx_export.ExportOptions(dynamic_shapes={"x": {0: "b"}}, dynamic_axes={"x": [0]})


class Blocks(nn.Module):
    """Ops whose form changed in opset 18 (Reduce* axes, Split) and LayerNorm (opset 17)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.norm(x).chunk(2, dim=-1)
        c = x[..., :5].chunk(2, dim=-1)  # uneven: sizes 3 and 2
        return a.mean(-1) + b.amax(-1) + c[1].sum(-1)


@pytest.mark.parametrize("opset", [16, 17])
def test_older_opsets_by_version_conversion(opset: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), Blocks())
    options = onnx_export.ExportOptions(opset_version=opset)
    program = onnx_export.dynamo_export(model, torch.randn(3, 4), export_options=options)
    assert program.model.opset_imports[""] == opset
    assert_onnx_program_close(program, model, torch.randn(3, 4))


def test_op_without_an_older_form_names_it() -> None:
    class BitwiseAnd(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x & y

    options = onnx_export.ExportOptions(opset_version=17)
    with pytest.raises(onnx_export.ConversionError, match=r"BitwiseAnd at .*:\d+.* is 18"):
        onnx_export.dynamo_export(
            BitwiseAnd(), torch.tensor([3, 5]), torch.tensor([1, 4]), export_options=options
        )


def test_exported_program_in_place_of_the_model() -> None:
    torch.manual_seed(0)
    model = Gate()
    x, mask = _inputs(2)
    exported = torch.export.export(model, (x, mask))
    program = onnx_export.dynamo_export(exported)  # the program's own example inputs
    assert program.exported_program is exported
    assert_onnx_program_close(program, model, x, mask)
    again = onnx_export.dynamo_export(exported, x, mask)
    assert [v.name for v in again.model.graph.inputs] == ["x", "mask"]
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    with pytest.raises(onnx_export.ExportInputError, match="already captured"):
        onnx_export.dynamo_export(exported, x, mask, export_options=options)


class Branchy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_capture_error_says_why_and_what_to_do() -> None:
    options = onnx_export.ExportOptions(capture_strategies=("non_strict",))
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(Branchy(), torch.randn(3), export_options=options)
    message = str(caught.value)
    assert "Could not guard on data-dependent expression" in message
    assert "torch.cond" in message
    assert caught.value.report_path is not None
    sarif = json.loads(Path(caught.value.report_path).read_text())
    texts = [r["message"]["text"] for r in sarif["runs"][0]["results"]]
    assert any("if x.sum() > 0" in t for t in texts), texts  # torch's whole explanation


def test_dim_out_of_its_range_gets_its_own_next_step() -> None:
    options = onnx_export.ExportOptions(
        dynamic_shapes={"input": {0: torch.export.Dim("b", min=3)}},
        capture_strategies=("non_strict",),
    )
    with pytest.raises(onnx_export.CaptureError, match="outside the range"):
        onnx_export.dynamo_export(nn.ReLU(), torch.randn(2, 4), export_options=options)
