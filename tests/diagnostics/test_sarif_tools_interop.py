"""Third-party readers accept our reports: ``sarif summary`` from sarif-tools."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from onnx_export.diagnostics import DiagnosticContext, Location, rules
from tests.sarif_helpers import assert_valid_sarif

SARIF_COMMAND = shutil.which("sarif")


@pytest.mark.skipif(SARIF_COMMAND is None, reason="sarif-tools (the `sarif` command) is missing")
def test_sarif_tools_summary_reads_our_report(tmp_path: Path) -> None:
    assert SARIF_COMMAND is not None
    context = DiagnosticContext("onnx-export", "0.1.0", source_root=tmp_path)
    for line in (3, 7):
        context.emit(
            rules.UNSUPPORTED_OP,
            message_args={"op": "aten::foo", "node": f"foo_{line}", "module": "net"},
            locations=[Location(str(tmp_path / "model.py"), line)],
        )
    context.emit(rules.DISPATCH_FALLBACK, message_args={"op": "a", "function": "f", "reason": "r"})
    context.finish(success=False, exception=RuntimeError("2 unsupported operators"))
    assert_valid_sarif(context.to_sarif())
    report = context.write_sarif(tmp_path / "report.sarif")

    completed = subprocess.run(
        [SARIF_COMMAND, "summary", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert "error: 2" in completed.stdout
    assert "warning: 1" in completed.stdout
    assert "OXE0006" in completed.stdout
