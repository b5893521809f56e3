"""Opsets 13, 14 and 15: each op that changed has its older form, or a refusal that says why.

Every model here is exported at the old opset, checked (``onnx.checker``, full), run in
ONNX Runtime against eager PyTorch, and its file declares the opset asked for. A refusal
names the op, the user's line, the lowest opset that has it, and one next step. The
adapter and the report are the same at every opset.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from onnx_export.diagnostics import DiagnosticOptions
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")

OLD = (13, 14, 15)


def _ops(program: onnx_export.ONNXProgram) -> set[str]:
    return {node.op_type for node in program.model_proto.graph.node}


def _declared(program: onnx_export.ONNXProgram) -> list[int]:
    return [o.version for o in program.model_proto.opset_import if o.domain in ("", "ai.onnx")]


class Triangles(nn.Module):
    """``Trilu`` (14) at 13: a mask from the sizes at run time."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.triu(x, 1) + torch.tril(x, -1) * 2, torch.triu(x.transpose(-1, -2))


class Activations(nn.Module):
    """``HardSwish`` (14), ``Mish`` (18), ``CastLike`` (15)."""

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.hardswish(x), F.mish(x), x * n  # int promoted to float


class Sizes(nn.Module):
    """``Shape`` with start/end (15), ``Reshape`` with allowzero (14), uneven ``Split``."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, c = x.shape
        head, tail = x[..., :5].split([3, 2], dim=-1)
        return x.reshape(b * t, c)[: t * 2], head.sum(-1), tail.amax(1)


class Norms(nn.Module):
    """``LayerNormalization`` (17), ``BatchNormalization`` (15), reductions (18)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.batch = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.batch(self.norm(x)).mean(dim=(1, 2), keepdim=True) + F.pad(x, (1, 1))[..., 1:-1]


CASES = {
    "triangles": (Triangles, lambda: (torch.randn(2, 5, 6),), {"x": {0: "b", 1: "r", 2: "c"}}),
    "activations": (
        Activations,
        lambda: (torch.randn(3, 4), torch.randint(-5, 5, (3, 4))),
        {"x": {0: "b"}, "n": {0: "b"}},
    ),
    "sizes": (Sizes, lambda: (torch.randn(2, 6, 8),), {"x": {0: "b", 1: "t"}}),
    "norms": (Norms, lambda: (torch.randn(2, 4, 8),), {"x": {0: "b"}}),
}


@pytest.mark.parametrize("opset", OLD, ids=lambda o: f"opset{o}")
@pytest.mark.parametrize("name", list(CASES))
def test_changed_ops_have_their_older_forms(name: str, opset: int) -> None:
    make, inputs, dynamic = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    options = onnx_export.ExportOptions(opset_version=opset, dynamic_shapes=dynamic)
    program = export_and_check(model, *inputs(), options=options)
    assert _declared(program) == [opset]
    newer = {"Trilu", "HardSwish", "Mish", "CastLike", "LayerNormalization"} & _ops(program)
    assert all(onnx.defs.get_schema(op, opset).since_version <= opset for op in newer), newer
    torch.manual_seed(1)
    bigger = tuple(torch.cat([t, t[:1]]) for t in inputs())  # the batch grown by one
    assert_onnx_program_close(program, model, *bigger)


class IntegerRelu(nn.Module):
    def forward(self, n: torch.Tensor) -> torch.Tensor:
        return torch.relu(n)


def test_relu_on_integers_at_13_is_a_max() -> None:
    # Relu has integer types from opset 14 (ONNX Runtime 1.32 has no kernel for them).
    options = onnx_export.ExportOptions(opset_version=13)
    program = export_and_check(IntegerRelu(), torch.randint(-5, 5, (3, 4)), options=options)
    assert "Max" in _ops(program) and "Relu" not in _ops(program)


class ScatterAdd(nn.Module):
    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.zeros(4, 3).scatter_add(0, index, x)  # ScatterElements reduction="add"


class Sample(nn.Module):
    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, align_corners=False)  # GridSample, opset 16


REFUSED = {
    "scatter-add": (
        ScatterAdd,
        lambda: (torch.randn(2, 3), torch.tensor([[0, 1, 2], [3, 0, 1]])),
        "ScatterElements",
        16,
    ),
    "grid-sample": (
        Sample,
        lambda: (torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1),
        "GridSample",
        16,
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_an_op_without_an_older_form_is_refused_with_line_and_lowest_opset(name: str) -> None:
    make, inputs, op_type, lowest = REFUSED[name]
    options = onnx_export.ExportOptions(opset_version=15)
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(make(), *inputs(), export_options=options)
    message = str(caught.value)
    assert f"Opset 15 has no form of {op_type}" in message, message
    assert f"{Path(__file__).name}:" in message, message  # the user's line
    assert f"the lowest opset that has it is {lowest}" in message, message
    assert f"export at opset {lowest} or higher" in message, message
    assert message.count("Next step") == 1, message
    # and at that opset it exports, and matches eager
    options = onnx_export.ExportOptions(opset_version=lowest)
    program = export_and_check(make(), *inputs(), options=options)
    assert _declared(program) == [lowest]


class Nested(nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor], scale: float = 2.0) -> dict[str, object]:
        total = inputs["a"] + inputs["b"].tril()
        return {"total": total * scale, "parts": [total.mean(-1), None]}


def _export_nested(opset: int, report: Path) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(
        opset_version=opset,
        diagnostic_options=DiagnosticOptions(report_path=str(report)),
    )
    x = {"a": torch.randn(2, 4, 4), "b": torch.randn(2, 4, 4)}
    program = export_and_check(Nested(), x, options=options)
    program.save_diagnostics(report)
    return program


def _rules(report: Path) -> list[str]:
    results = json.loads(report.read_text())["runs"][0]["results"]
    return [r["ruleId"] for r in results]


@pytest.mark.parametrize("opset", [13, 15], ids=lambda o: f"opset{o}")
def test_adapter_and_report_are_the_same_at_every_opset(opset: int, tmp_path: Path) -> None:
    reference = _export_nested(18, tmp_path / "18.sarif")
    older = _export_nested(opset, tmp_path / f"{opset}.sarif")
    assert older.adapter_spec.to_json() == reference.adapter_spec.to_json()
    assert _rules(tmp_path / f"{opset}.sarif") == _rules(tmp_path / "18.sarif")
    saved = older.save(tmp_path / "m.onnx")
    loaded = onnx_export.load(saved)
    x = {"a": torch.randn(2, 4, 4), "b": torch.randn(2, 4, 4)}
    got, want = loaded(x), Nested()(x)
    assert set(got) == set(want) and got["parts"][1] is None
    torch.testing.assert_close(torch.as_tensor(got["total"]), want["total"])


def test_onnxruntime_target_at_opset_13() -> None:
    # ONNX Runtime's fused ops (some in the default domain) keep their own versions.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0).eval()
    options = onnx_export.ExportOptions(opset_version=13, target="onnxruntime")
    x = torch.randn(2, 5, 8)
    program = onnx_export.dynamo_export(layer, x, export_options=options)
    assert program.model.opset_imports[""] == 13
    assert any(node.domain == "com.microsoft" for node in program.model.graph)
    assert_onnx_program_close(program, layer, x)
