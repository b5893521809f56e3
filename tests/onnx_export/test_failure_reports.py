"""Failures outside the model's code: where the SARIF report points, and what it lists.

A capture failure that never reached the model (dynamic shapes that do not fit the inputs)
is located at the user's call of ``dynamo_export``; the report's artifacts leave out the
exporter's own files. A meta-device model with real example inputs is refused before
capture with a specific message.
"""

from __future__ import annotations

import json
import pathlib
import stat

import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.diagnostics import DiagnosticOptions

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

EXPORTER = pathlib.Path(onnx_export.__file__).parent.resolve()


class WithDict(nn.Module):
    def forward(self, x: torch.Tensor, extra: dict[str, torch.Tensor]) -> torch.Tensor:
        return x * 2 + extra["y"]


def test_capture_failure_outside_model_code_is_located_at_the_call(
    tmp_path: pathlib.Path,
) -> None:
    report = tmp_path / "failed.sarif"
    options = onnx_export.ExportOptions(
        # The example's batch of 2 is outside the Dim's range: torch.export refuses it
        # while processing the dynamic shapes, before any of the model's code runs.
        dynamic_shapes={"x": {0: Dim("batch", min=5)}, "extra": None},
        diagnostic_options=DiagnosticOptions(report_path=str(report)),
    )
    inputs = (torch.randn(2, 3), {"y": torch.randn(3)})
    with pytest.raises(onnx_export.OnnxExportError):
        onnx_export.dynamo_export(WithDict(), *inputs, export_options=options)  # CALL_LINE
    run = json.loads(report.read_text())["runs"][0]
    errors = [r for r in run["results"] if r.get("level") == "error"]
    assert errors
    call_line = next(
        number
        for number, line in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1)
        if line.rstrip().endswith("# CALL_LINE")
    )
    for result in errors:
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"].endswith("test_failure_reports.py")
        assert physical["region"]["startLine"] == call_line
    uris = [a["location"]["uri"] for a in run["artifacts"]]
    assert not [u for u in uris if str(EXPORTER) in u or u.startswith("onnx_export/")], uris
    assert report.stat().st_mode & stat.S_IRGRP  # a report the user placed is not private


def test_meta_model_with_real_inputs_says_what_to_do() -> None:
    with torch.device("meta"):
        model = nn.Linear(8, 4)
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(model, torch.randn(2, 8))
    message = str(caught.value)
    assert "weights are on the meta device (e.g. 'weight')" in message
    assert "input args[0] is a real cpu tensor of shape (2, 8)" in message
    assert "device='meta'" in message and "enable_fake_mode()" in message
    assert "FakeTensorDeviceMismatchError" not in message


def test_meta_model_with_meta_inputs_exports(tmp_path: pathlib.Path) -> None:
    with torch.device("meta"):
        model = nn.Linear(8, 4)
    program = onnx_export.dynamo_export(model, torch.randn(2, 8, device="meta"))
    real = nn.Linear(8, 4)
    path = program.save(tmp_path / "meta.onnx", model_state=real.state_dict())
    x = torch.randn(2, 8)
    got = onnx_export.load(path)(x)
    torch.testing.assert_close(got, real(x).detach(), rtol=1e-4, atol=1e-5)
