"""Every export records where its time went: ``ONNXProgram.stage_times`` (issue #22)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import onnx_export
from onnx_export.diagnostics import DiagnosticOptions, Level

_STAGES = ("capture", "decomposition", "translation", "report", "adapter")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc(x))


@pytest.mark.parametrize("target", ["onnx", "onnxruntime"])
def test_each_stage_is_timed_and_the_stages_add_up_to_at_most_the_total(
    target: str, tmp_path: Path
) -> None:
    model, x = _Net().eval(), torch.randn(2, 4)
    options = onnx_export.ExportOptions(target=target)  # type: ignore[arg-type]  # a str
    program = onnx_export.dynamo_export(model, x, export_options=options)
    torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
    times = program.stage_times
    # The weight folds run first (weight-only chains), then the optimizer, then folds again.
    ort = ["ort_target"] if target != "onnx" else []
    # Then the default parity check against eager PyTorch (a small model: it runs), and the
    # edge probe (the smallest sizes, fully masked rows) on the session it built.
    expected = [*_STAGES, "folding", "optimizer", "opset", *ort, "verify", "edge probe"]
    assert [s for s in times if s != "total"] == expected
    assert all(seconds >= 0.0 for seconds in times.values())
    assert sum(v for k, v in times.items() if k != "total") <= times["total"]
    program.save(tmp_path / "net.onnx")
    first = program.stage_times["save"]
    assert 0.0 < program.stage_times["check"] <= first  # the graph check is part of saving
    program.save(tmp_path / "again.onnx")
    assert program.stage_times["save"] > first  # each save adds its seconds


def test_without_the_optimizer_no_optimizer_stage_is_recorded() -> None:
    model, x = _Net().eval(), torch.randn(2, 4)
    options = onnx_export.ExportOptions(optimize=False)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
    assert "optimizer" not in program.stage_times
    assert "folding" not in program.stage_times
    assert program.stage_times["translation"] > 0.0


def test_the_report_has_the_stage_times_as_one_note() -> None:
    model, x = _Net().eval(), torch.randn(2, 4)
    verbose = DiagnosticOptions(verbosity=Level.NOTE)
    options = onnx_export.ExportOptions(diagnostic_options=verbose)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
    log = program.diagnostic_context.to_sarif()
    (note,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "OXE0021"]
    seconds = note["properties"]["stage_seconds"]
    times = program.stage_times
    assert list(seconds) == [s for s in times if s not in ("total", "save")]
    assert seconds == pytest.approx({s: times[s] for s in seconds}, abs=1e-6)
    assert note["properties"]["total_seconds"] <= times["total"]
    assert f"capture {times['capture']:.3f} s" in note["message"]["text"]


def test_the_stage_times_note_is_dropped_at_the_default_verbosity() -> None:
    model, x = _Net().eval(), torch.randn(2, 4)
    program = onnx_export.dynamo_export(model, x)
    torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
    log = program.diagnostic_context.to_sarif()
    assert not [r for r in log["runs"][0]["results"] if r["ruleId"] == "OXE0021"]
    assert program.stage_times["capture"] > 0.0  # still on the program
