"""Through the Python API torch's logs and prints never reach stderr: they go to the report.

They reach stderr only when the user asks for logs (the ``onnx_export`` logger at INFO).
"""

from __future__ import annotations

import json
import logging
import pathlib
import sys
from collections.abc import Iterator

import pytest
import torch

import onnx_export
from onnx_export.diagnostics import DiagnosticOptions
from tests.helpers import assert_onnx_program_close
from tests.sarif_helpers import assert_valid_sarif


class _Lstm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 8, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


class _DataDependentIf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # torch.export cannot trace this: it prints graphs while failing
            return x + 1
        return x - 1


class _LogsLikeTorch(torch.nn.Module):
    """Logs and prints the way torch does while it traces (its own handlers, sys.stderr)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logging.getLogger("torch._guards").error("Error while creating guard: %s", "probe")
        logging.getLogger("torch._dynamo.probe").warning("dynamo probe warning")
        print("class GraphModule(torch.nn.Module): probe", file=sys.stderr)
        return x * 2


@pytest.fixture
def onnx_export_logger_level() -> Iterator[logging.Logger]:
    logger = logging.getLogger("onnx_export")
    saved = logger.level
    yield logger
    logger.setLevel(saved)


def _report(path: pathlib.Path) -> list[str]:
    log = json.loads(path.read_text())
    assert_valid_sarif(log)
    return [r["message"]["text"] for r in log["runs"][0]["results"]]


def test_lstm_with_a_dynamic_batch_writes_nothing_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = _Lstm().eval()
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, torch.randn(2, 5, 4), export_options=options)
    assert capfd.readouterr().err == ""
    assert_onnx_program_close(program, model, torch.randn(3, 5, 4))


def test_data_dependent_if_fails_without_writing_to_stderr(
    capfd: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    report = tmp_path / "failed.sarif"
    options = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(report_path=report),
        capture_strategies=("non_strict",),
    )
    with pytest.raises(onnx_export.CaptureError):
        onnx_export.dynamo_export(_DataDependentIf(), torch.randn(3), export_options=options)
    assert capfd.readouterr().err == ""
    # What torch printed (the partial FX graph) is in the report instead.
    assert any(m.startswith("[sys.stderr]") and "def forward" in m for m in _report(report))


def test_torch_logs_and_prints_go_to_the_report(
    capfd: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    report = tmp_path / "ok.sarif"
    options = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(report_path=report, write_report="always")
    )
    model = _LogsLikeTorch()
    program = onnx_export.dynamo_export(model, torch.randn(2, 3), export_options=options)
    assert capfd.readouterr().err == ""
    messages = _report(report)
    assert any(m.startswith("[torch._guards] Error while creating guard: probe") for m in messages)
    assert "[torch._dynamo.probe] dynamo probe warning" in messages
    assert any(m.startswith("[sys.stderr] class GraphModule") for m in messages)
    # The logs from torch.export's own tracing are recorded only once each.
    assert len([m for m in messages if "creating guard: probe" in m]) == len(
        [m for m in messages if "dynamo probe warning" in m]
    )
    assert_onnx_program_close(program, model, torch.randn(2, 3))
    # torch's own handlers are back once the export is over.
    assert any(isinstance(h, logging.StreamHandler) for h in logging.getLogger("torch").handlers)


def test_logs_reach_stderr_when_the_user_asks_for_them(
    capfd: pytest.CaptureFixture[str], onnx_export_logger_level: logging.Logger
) -> None:
    onnx_export_logger_level.setLevel(logging.INFO)
    handler = logging.StreamHandler(sys.stderr)  # as torch's own, on this test's stderr
    logging.getLogger("torch").addHandler(handler)
    model = _LogsLikeTorch()
    try:
        program = onnx_export.dynamo_export(model, torch.randn(2, 3))
    finally:
        logging.getLogger("torch").removeHandler(handler)
    err = capfd.readouterr().err
    assert "Error while creating guard: probe" in err
    assert "class GraphModule(torch.nn.Module): probe" in err
    assert_onnx_program_close(program, model, torch.randn(2, 3))
