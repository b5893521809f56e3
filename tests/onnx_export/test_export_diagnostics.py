"""Diagnostics of real exports: SARIF reports that validate and point at the user's lines."""

from __future__ import annotations

import inspect
import json
import pathlib
import re
import subprocess
import sys
import threading
import warnings
from typing import Any

import pytest
import torch
from onnxscript import opset18 as op

import onnx_export
from onnx_export.diagnostics import DiagnosticOptions, Level
from tests.golden_files import check_golden
from tests.sarif_helpers import assert_valid_sarif

pytestmark = pytest.mark.usefixtures("private_temp_folder")

HERE = pathlib.Path(__file__).resolve()


@torch.library.custom_op("diagtest::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class CallsMystery(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        return mystery(y) + 1  # MYSTERY_LINE


class DataDependentIf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # BRANCH_LINE
            return x + 1
        return x - 1


class Warns(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("this model warns on purpose", UserWarning, stacklevel=1)
        return x * 2


class UsesRelu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x) - 0.5
        z = torch.relu(y)  # RELU_LINE
        return z * 2


def _line(marker: str) -> int:
    source = HERE.read_text().splitlines()
    return next(i for i, text in enumerate(source, 1) if text.rstrip().endswith(f"# {marker}"))


def _report(error: onnx_export.OnnxExportError) -> dict[str, Any]:
    assert error.report_path is not None and error.report_path.exists()
    log = json.loads(error.report_path.read_text())
    assert_valid_sarif(log)
    return log


def _results(log: dict[str, Any], rule_id: str) -> list[dict[str, Any]]:
    return [r for r in log["runs"][0]["results"] if r["ruleId"] == rule_id]


def _resolves_to(location: dict[str, Any], log: dict[str, Any], path: pathlib.Path) -> bool:
    artifact = location["physicalLocation"]["artifactLocation"]
    uri = artifact["uri"]
    base = artifact.get("uriBaseId")
    if base:
        root = log["runs"][0]["originalUriBaseIds"][base]["uri"]
        uri = root + uri
    return uri.endswith(path.as_posix().lstrip("/")) or pathlib.Path(uri) == path


def test_unsupported_custom_op_is_reported_at_the_calling_line(tmp_path: pathlib.Path) -> None:
    report_path = tmp_path / "failed.sarif"
    options = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(report_path=report_path)
    )
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(CallsMystery(), torch.randn(4), export_options=options)
    line = _line("MYSTERY_LINE")
    message = str(caught.value)
    assert "diagtest::mystery" in message
    assert f"{HERE}:{line}" in message
    assert str(report_path) in message
    assert caught.value.report_path == report_path
    log = _report(caught.value)
    (result,) = _results(log, "OXE0006")
    assert result["level"] == "error"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == line
    assert _resolves_to(result["locations"][0], log, HERE)
    assert "diagtest::mystery" in result["message"]["text"]


def test_capture_failure_has_an_error_per_strategy_at_the_users_line() -> None:
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(DataDependentIf(), torch.randn(3))
    log = _report(caught.value)
    attempts = _results(log, "OXE0001")
    assert {r["message"]["text"].split("'")[1] for r in attempts} == {"non_strict", "strict"}
    assert all(r["level"] == "error" for r in attempts)
    lines = {
        loc["physicalLocation"].get("region", {}).get("startLine")
        for r in attempts
        for loc in r.get("locations", [])
    }
    assert _line("BRANCH_LINE") in lines
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_failure_report_goes_to_the_temp_dir_not_the_working_dir(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(DataDependentIf(), torch.randn(3))
    assert caught.value.report_path is not None
    assert caught.value.report_path.parent != tmp_path
    assert list(tmp_path.iterdir()) == []


def test_wrong_registered_function_is_located_by_verify() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op("aten::relu", lambda x: op.Abs(x))  # noqa: PLW0108 - deliberately wrong
    options = onnx_export.ExportOptions(onnx_registry=registry)
    x = torch.randn(6, 5)
    program = onnx_export.dynamo_export(UsesRelu(), x, export_options=options)
    result = program.verify(x)
    assert not result.ok
    assert result.culprit is not None
    assert result.culprit.node == "relu"
    assert result.culprit.origin.line == _line("RELU_LINE")
    log = program.diagnostic_context.to_sarif()
    assert_valid_sarif(log)
    (mismatch,) = _results(log, "OXE0013")
    assert mismatch["locations"][0]["physicalLocation"]["region"]["startLine"] == _line("RELU_LINE")
    assert "aten.relu" in mismatch["message"]["text"]


def test_verify_option_fails_the_export_on_mismatch() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op("aten::relu", lambda x: op.Abs(x))  # noqa: PLW0108
    options = onnx_export.ExportOptions(onnx_registry=registry, verify=True)
    with pytest.raises(onnx_export.VerificationError, match="relu"):
        onnx_export.dynamo_export(UsesRelu(), torch.randn(6, 5), export_options=options)


def test_verify_passes_for_a_correct_export() -> None:
    x = torch.randn(6, 5)
    options = onnx_export.ExportOptions(
        verify=True, diagnostic_options=DiagnosticOptions(verbosity=Level.NOTE)
    )
    program = onnx_export.dynamo_export(UsesRelu(), x, export_options=options)
    assert program.verify(x).ok
    log = program.diagnostic_context.to_sarif()
    assert _results(log, "OXE0012")
    assert not _results(log, "OXE0013")


def test_warnings_as_errors_fails_the_export() -> None:
    strict = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(warnings_as_errors=True)
    )
    with pytest.raises(onnx_export.OnnxExportError, match="warns on purpose") as caught:
        onnx_export.dynamo_export(Warns(), torch.randn(3), export_options=strict)
    assert _results(_report(caught.value), "OXE0014")
    program = onnx_export.dynamo_export(Warns(), torch.randn(3))
    warned = _results(program.diagnostic_context.to_sarif(), "OXE0014")
    assert any("warns on purpose" in r["message"]["text"] for r in warned)


def test_library_warnings_do_not_fail_warnings_as_errors() -> None:
    # torch 2.13 warns (FutureWarning) from its own code during export; that is not the
    # user's warning, so it is a note and the export succeeds.
    strict = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(warnings_as_errors=True, verbosity=Level.NOTE)
    )
    program = onnx_export.dynamo_export(UsesRelu(), torch.randn(3), export_options=strict)
    for result in _results(program.diagnostic_context.to_sarif(), "OXE0014"):
        assert result["level"] in ("none", "note")


@pytest.mark.parametrize(
    ("verbosity", "has_notes"),
    [(Level.NOTE, True), (Level.WARNING, False)],
    ids=["note", "warning"],
)
def test_verbosity_controls_notes(verbosity: Level, has_notes: bool) -> None:
    options = onnx_export.ExportOptions(diagnostic_options=DiagnosticOptions(verbosity=verbosity))
    program = onnx_export.dynamo_export(UsesRelu(), torch.randn(3), export_options=options)
    log = program.diagnostic_context.to_sarif()
    assert_valid_sarif(log)
    levels = {r["level"] for r in log["runs"][0]["results"]}
    assert bool(_results(log, "OXE0004")) is has_notes
    assert ("none" in levels or "note" in levels) is has_notes


def test_parallel_exports_keep_their_own_reports(tmp_path: pathlib.Path) -> None:
    jobs = {
        "ok_relu": (UsesRelu(), torch.randn(3)),
        "bad_op": (CallsMystery(), torch.randn(3)),
        "bad_if": (DataDependentIf(), torch.randn(3)),
        "ok_warns": (Warns(), torch.randn(3)),
    }
    logs: dict[str, dict[str, Any]] = {}
    failures: list[BaseException] = []

    def run(name: str) -> None:
        model, x = jobs[name]
        options = onnx_export.ExportOptions(
            diagnostic_options=DiagnosticOptions(report_path=tmp_path / f"{name}.sarif")
        )
        try:
            program = onnx_export.dynamo_export(model, x, export_options=options)
            assert torch.allclose(program(x), model(x), atol=1e-5)
            logs[name] = program.diagnostic_context.to_sarif()
        except onnx_export.OnnxExportError as e:
            logs[name] = _report(e)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    rule_ids = {
        name: {r["ruleId"] for r in log["runs"][0]["results"]} for name, log in logs.items()
    }
    assert "OXE0006" in rule_ids["bad_op"] and "OXE0006" not in rule_ids["bad_if"]
    assert "OXE0001" in rule_ids["bad_if"] and "OXE0001" not in rule_ids["bad_op"]
    assert "OXE0014" in rule_ids["ok_warns"]
    assert not rule_ids["ok_relu"] & {"OXE0006", "OXE0001", "OXE0014"}
    for name in ("ok_relu", "ok_warns"):
        assert logs[name]["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_sarif_tools_reads_an_export_report(tmp_path: pathlib.Path) -> None:
    options = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(report_path=tmp_path / "r.sarif")
    )
    with pytest.raises(onnx_export.UnsupportedOpsError):
        onnx_export.dynamo_export(CallsMystery(), torch.randn(4), export_options=options)
    sarif = pathlib.Path(sys.executable).with_name("sarif")
    command = [str(sarif)] if sarif.exists() else [sys.executable, "-m", "sarif"]
    done = subprocess.run(
        [*command, "summary", str(tmp_path / "r.sarif")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "error" in done.stdout.lower()


def test_cli_summarizes_a_failing_report(tmp_path: pathlib.Path) -> None:
    options = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(report_path=tmp_path / "r.sarif")
    )
    with pytest.raises(onnx_export.UnsupportedOpsError):
        onnx_export.dynamo_export(CallsMystery(), torch.randn(4), export_options=options)
    done = subprocess.run(
        [sys.executable, "-m", "onnx_export", "diagnostics", str(tmp_path / "r.sarif")],
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE.parents[2],
    )
    assert done.returncode == 1
    assert f"{HERE.name}:{_line('MYSTERY_LINE')}" in done.stdout
    assert "OXE0006" in done.stdout


# -- golden snapshots ---------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(\.\d+)?(e[-+]?\d+)?")


def _stable_view(log: dict[str, Any]) -> dict[str, Any]:
    """What must not change between runs: rules hit, levels, messages, user locations.

    Times, durations, versions, absolute paths and library stack frames vary by machine
    and torch version, so they are left out or masked.
    """
    run = log["runs"][0]
    root = str(HERE.parents[2])
    results = []
    for result in run["results"]:
        if result["ruleId"] in ("OXE0014", "OXE0015"):
            continue  # library warnings and log records differ between torch versions
        text = _NUMBER.sub("<N>", result["message"]["text"]).replace(root, "<ROOT>")
        if result["ruleId"] == "OXE0026":  # which libraries the process imported varies
            text = text.split(":")[0] + ": <PATCHES>."
        first_line = text.splitlines()[0]
        locations = [
            {
                "file": pathlib.Path(loc["physicalLocation"]["artifactLocation"]["uri"]).name,
                "line": loc["physicalLocation"].get("region", {}).get("startLine"),
            }
            for loc in result.get("locations", [])
        ]
        results.append(
            {
                "ruleId": result["ruleId"],
                "level": result["level"],
                "message": first_line,
                "locations": locations,
            }
        )
    return {
        "schema": log["$schema"],
        "version": log["version"],
        "tool": run["tool"]["driver"]["name"],
        "rules": [
            r["id"] for r in run["tool"]["driver"]["rules"] if r["id"] not in ("OXE0014", "OXE0015")
        ],
        "executionSuccessful": run["invocations"][0]["executionSuccessful"],
        "results": results,
    }


def _check_golden(name: str, log: dict[str, Any]) -> None:
    assert_valid_sarif(log)
    check_golden(name, _stable_view(log))


def test_golden_failing_export() -> None:
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(CallsMystery(), torch.randn(4))
    _check_golden("failing_export", _report(caught.value))


def test_golden_successful_export() -> None:
    torch.manual_seed(0)
    options = onnx_export.ExportOptions(diagnostic_options=DiagnosticOptions(verbosity=Level.NOTE))
    program = onnx_export.dynamo_export(UsesRelu(), torch.randn(3), export_options=options)
    program.verify(torch.randn(3))
    _check_golden("successful_export", program.diagnostic_context.to_sarif())


def test_this_file_lines_are_found() -> None:
    source = inspect.getsource(CallsMystery)
    assert "MYSTERY_LINE" in source


def test_a_report_that_cannot_be_written_is_named_in_the_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    report_path = tmp_path / "a-file" / "failed.sarif"
    options = onnx_export.ExportOptions(
        diagnostic_options=DiagnosticOptions(report_path=report_path)
    )
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(CallsMystery(), torch.randn(4), export_options=options)
    assert caught.value.report_path is None
    message = str(caught.value)
    assert f"The SARIF report could not be written to {report_path}" in message
    assert "diagtest::mystery" in message
