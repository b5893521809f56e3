"""summarize(), load_sarif() and the ``python -m onnx_export.diagnostics`` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from onnx_export.diagnostics import (
    DiagnosticContext,
    DiagnosticOptions,
    Level,
    Location,
    SarifFormatError,
    load_sarif,
    main,
    rules,
    summarize,
)
from tests.sarif_helpers import assert_valid_sarif

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def failing_export_context() -> DiagnosticContext:
    context = DiagnosticContext(
        "onnx-export", "0.1.0", DiagnosticOptions(verbosity=Level.NOTE), source_root="/proj"
    )
    context.emit(rules.CAPTURE_SUCCEEDED, message_args={"strategy": "strict", "seconds": 0.9})
    for node, line in (("bessel_j0", 14), ("bessel_j1", 20)):
        context.emit(
            rules.UNSUPPORTED_OP,
            message_args={"op": f"aten::special_{node}", "node": node, "module": "net.block"},
            locations=[Location("/proj/model.py", line, 12)],
        )
    context.emit(
        rules.DISPATCH_FALLBACK,
        message_args={"op": "aten::add.Tensor", "function": "aten_add", "reason": "int8 input"},
        locations=[Location("/usr/lib/python3/torch/x.py", 3)],
    )
    context.emit(
        rules.EXPORT_FAILED,
        message_args={"stage": "translation", "exception_message": "2 unsupported operators"},
    )
    context.finish(success=False, exception=RuntimeError("2 unsupported operators"))
    return context


def write_report(context: DiagnosticContext, folder: Path) -> Path:
    log = context.to_sarif()
    assert_valid_sarif(log)
    return context.write_sarif(folder / "report.sarif")


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "onnx_export.diagnostics", *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
        timeout=60,
        check=False,
    )


# --- summarize --------------------------------------------------------------------------------


def test_summary_groups_by_rule_and_level_errors_first() -> None:
    assert summarize(failing_export_context().to_sarif()) == "\n".join(
        [
            "onnx-export 0.1.0: failed",
            "  error: RuntimeError: 2 unsupported operators",
            "",
            "OXE0006 unsupported-op: 2 errors",
            "  model.py:14:12: error: No ONNX function is registered for aten::special_bessel_j0"
            " (node bessel_j0 in module net.block).",
            "  model.py:20:12: error: No ONNX function is registered for aten::special_bessel_j1"
            " (node bessel_j1 in module net.block).",
            "",
            "OXE0018 export-failed: 1 error",
            "  error: Export failed during translation: 2 unsupported operators",
            "",
            "OXE0005 dispatch-fallback: 1 warning",
            "  /usr/lib/python3/torch/x.py:3: warning: No exact ONNX function matched"
            " aten::add.Tensor; fell back to aten_add: int8 input.",
            "",
            "OXE0002 capture-succeeded: 1 note",
            "  note: Captured the model with strategy 'strict' in 0.9 s.",
            "",
            "3 errors, 1 warning, 1 note",
        ]
    )


def test_summary_of_an_empty_successful_run() -> None:
    context = DiagnosticContext("onnx-export", "0.1.0")
    context.finish(success=True)
    assert summarize(context.to_sarif()) == (
        "onnx-export 0.1.0: succeeded\n\n0 errors, 0 warnings, 0 notes"
    )


@pytest.mark.parametrize(
    "log",
    [
        {},
        {"runs": "not a list"},
        {"runs": [None, 3, {}]},
        {"runs": [{"results": [{}]}]},
        {"runs": [{"results": [{"message": {}, "locations": [{}]}], "tool": {"driver": 1}}]},
        {"runs": [{"results": [{"ruleIndex": 7, "level": 3, "locations": "x"}]}]},
    ],
    ids=["empty", "runs-not-list", "junk-runs", "empty-result", "empty-pieces", "bad-types"],
)
def test_summary_is_defensive_about_missing_or_odd_keys(log: dict[str, object]) -> None:
    last_line = summarize(log).splitlines()[-1]
    assert re.fullmatch(r"\d+ errors?, \d+ warnings?, \d+ notes?", last_line)


def test_summary_of_another_tools_log() -> None:
    log = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "other-linter",
                        "rules": [
                            {
                                "id": "L1",
                                "name": "too-long",
                                "defaultConfiguration": {"level": "error"},
                                "messageStrings": {
                                    "m": {"text": "Line is {0} long; limit {{ {1} }}."}
                                },
                            }
                        ],
                    }
                },
                "artifacts": [{"location": {"uri": "file:///src/a%20b.py"}}],
                "results": [
                    # level from the rule's default configuration, message from messageStrings,
                    # uri from the artifacts table
                    {
                        "ruleId": "L1",
                        "message": {"id": "m", "arguments": ["120", "100"]},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"index": 0},
                                    "region": {"startLine": 4},
                                }
                            }
                        ],
                    },
                    {"rule": {"id": "L2"}, "message": {"text": "no level, no rule"}},
                    {"ruleId": "L3", "kind": "pass", "message": {"text": "checked"}},
                ],
            }
        ],
    }
    assert summarize(log) == "\n".join(
        [
            "other-linter",
            "",
            "L1 too-long: 1 error",
            "  /src/a b.py:4: error: Line is 120 long; limit { 100 }.",
            "",
            "L2: 1 warning",
            "  warning: no level, no rule",
            "",
            "L3: 1 pass",
            "  pass: checked",
            "",
            "1 error, 1 warning, 0 notes, 1 pass",
        ]
    )


def test_multiline_messages_are_indented() -> None:
    context = DiagnosticContext("t", "1")
    context.emit(rules.INPUT_MISMATCH, message_args={"detail": "first\nsecond"})
    assert (
        "  error: The inputs do not match what the model was exported with: first\n    second"
        in (summarize(context.to_sarif()))
    )


# --- load_sarif -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "holds a JSON list"),
        ('{"version": "2.0.0", "runs": []}', "version '2.0.0'; expected '2.1.0'"),
        ('{"runs": []}', "version None"),
        ('{"version": "2.1.0"}', "no 'runs' list"),
    ],
    ids=["not-json", "not-object", "old-version", "no-version", "no-runs"],
)
def test_load_sarif_rejects_non_sarif(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.sarif"
    path.write_text(content)
    with pytest.raises(SarifFormatError, match=match):
        load_sarif(path)


def test_load_sarif_reads_what_we_write(tmp_path: Path) -> None:
    context = failing_export_context()
    path = write_report(context, tmp_path)
    assert load_sarif(path) == context.to_sarif()


def test_load_sarif_accepts_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.sarif"
    path.write_bytes(b'\xef\xbb\xbf{"version": "2.1.0", "runs": []}')
    assert load_sarif(path)["runs"] == []


# --- main and python -m onnx_export.diagnostics -------------------------------------------


def test_main_exit_codes_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failing = write_report(failing_export_context(), tmp_path)
    assert main([str(failing)]) == 1
    assert "3 errors, 1 warning, 1 note" in capsys.readouterr().out

    clean = DiagnosticContext("t", "1").write_sarif(tmp_path / "clean.sarif")
    assert main([str(clean)]) == 0
    assert main([str(tmp_path / "missing.sarif")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([]) == 2  # usage error
    assert main(["--help"]) == 0


def test_python_m_diagnostics_returns_1_for_errors(tmp_path: Path) -> None:
    report = write_report(failing_export_context(), tmp_path)
    completed = run_module(str(report))
    assert completed.returncode == 1, completed.stderr
    assert "OXE0006 unsupported-op: 2 errors" in completed.stdout
    assert completed.stdout.rstrip().endswith("3 errors, 1 warning, 1 note")


def test_python_m_diagnostics_returns_0_without_errors(tmp_path: Path) -> None:
    context = DiagnosticContext("onnx-export", "0.1.0", DiagnosticOptions(verbosity=Level.NOTE))
    context.emit(rules.MODEL_SAVED, message_args={"path": "m.onnx", "size": 1024})
    context.emit(rules.DISPATCH_FALLBACK, message_args={"op": "a", "function": "f", "reason": "r"})
    context.finish(success=True)
    completed = run_module(str(write_report(context, tmp_path)))
    assert completed.returncode == 0, completed.stderr
    assert "0 errors, 1 warning, 1 note" in completed.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("{oops", "not valid JSON"), ('{"version": "1"}', "expected '2.1.0'")],
    ids=["missing", "not-json", "wrong-version"],
)
def test_python_m_diagnostics_returns_2_for_unreadable_input(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "input.sarif"
    if content is not None:
        path.write_text(content)
    completed = run_module(str(path))
    assert completed.returncode == 2
    assert message in completed.stderr
    assert completed.stdout == ""
