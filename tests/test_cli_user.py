"""What a new user meets first on the command line: --version, "did you mean", a global -v,
help that states the real defaults, install hints that are true, output paths checked
before the export runs (and missing folders created, as ``ONNXProgram.save`` does).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import textwrap

import numpy as np
import pytest
import torch

import onnx_export
from onnx_export._environment import TESTED_TORCH, EnvironmentReport
from onnx_export._options import DEFAULT_OPSET
from onnx_export.cli import _parser, main
from tests.sarif_helpers import assert_valid_sarif

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]

FACTORY = """
import torch


def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3), (torch.randn(2, 4),)
"""


@pytest.fixture
def work(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    (tmp_path / "factories.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_version(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capfd.readouterr().out.strip() == f"onnx-export {onnx_export.__version__}"


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["exprot", "f:m", "-o", "m.onnx"], "'export'"),
        (["verfy"], "'verify'"),
        (["inof"], "'info'"),
    ],
)
def test_a_mistyped_command_gets_did_you_mean(
    argv: list[str], suggestion: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and f"did you mean {suggestion}?" in err, err


@pytest.mark.parametrize("argv", [["-v", "info", "nope.onnx"], ["info", "-v", "nope.onnx"]])
def test_verbose_before_or_after_the_command(argv: list[str]) -> None:
    parsed = _parser().parse_known_args(argv)[0]
    from onnx_export.cli import _parse

    args = _parse(argv)
    assert isinstance(args, argparse.Namespace) and args.verbose is True
    assert parsed.command == "info"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_opset_help_states_the_real_default() -> None:
    for name in ("export", "hf"):
        help_text = " ".join(_subparsers()[name].format_help().split())
        assert f"(default {DEFAULT_OPSET})" in help_text, name
        assert "(default 18)" not in help_text or DEFAULT_OPSET == 18


def test_every_stated_default_is_the_real_one() -> None:
    """Where a help text names a default value, the option's default is that value."""
    checked = 0
    for name, parser in _subparsers().items():
        for action in parser._actions:
            text = action.help or ""
            match = re.search(r"\(default:? ([^)\s;,]+)", text)
            if match is None and (action.choices or isinstance(action.default, float)):
                match = re.search(r"\(([\w.+-]+)\)$", text)  # "execution provider (cpu)"
                if match and action.choices and match.group(1) not in action.choices:
                    match = None
            if match is None or action.default in (None, False, argparse.SUPPRESS):
                continue
            default = action.default
            if isinstance(default, pathlib.Path):
                shown = default.name
            else:
                shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert match.group(1) == shown, f"{name} {action.option_strings}: {text!r}"
            checked += 1
    assert checked >= 3


def test_doctor_suggests_the_tested_cpu_torch(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from onnx_export import _environment

    report = EnvironmentReport(
        onnx_export="0", python="3", platform="x", torch=None, onnxscript=None, onnx_ir=None,
        onnx="1", onnxruntime="1", execution_providers=("CPUExecutionProvider",),
        export_supported=False,
        problems=(_environment._import_version("torch", "no_such_module_for_test")[1] or "",),
    )  # fmt: skip
    monkeypatch.setattr(_environment, "check_environment", lambda: report)
    assert main(["doctor"]) == 1
    out, err = capfd.readouterr()
    hint = f"pip install torch=={TESTED_TORCH} --index-url https://download.pytorch.org/whl/cpu"
    assert hint in out and hint in err
    assert "`pip install torch`" not in out + err


def test_hf_without_transformers_names_the_hf_extra(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ckpt").mkdir()
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    script = textwrap.dedent(
        """
        import sys
        sys.modules["transformers"] = None  # as in an install without the hf extra
        from onnx_export.cli import main
        print("code:", main(["hf", "ckpt", "-o", "out"]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "code: 2" in result.stdout, result.stdout + result.stderr
    assert "pip install 'onnx-export[hf]'" in result.stderr
    assert "onnx-export[export]" not in result.stderr  # the hf extra alone: it has torch too


def test_an_unwritable_output_is_refused_before_the_export(
    work: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    locked = work / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(  # root may write anywhere: say this folder is read-only
        os, "access", lambda p, mode: False if pathlib.Path(p) == locked else real_access(p, mode)
    )

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("the export ran before the output path was checked")

    monkeypatch.setattr("onnx_export._export.dynamo_export", no_export)
    for argv in (
        ["export", "factories:linear", "-o", "locked/m.onnx"],
        ["export", "factories:linear", "-o", "locked/new/m.onnx"],
        ["export", "factories:linear", "-o", "m.onnx", "--report", "locked/r.sarif"],
        ["export", "factories:linear", "-o", "factories.py/m.onnx"],
    ):
        assert main(argv) == 2, argv
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and "error:" in err, err
        assert "not writable" in err or "is a file, not a folder" in err, err


def test_missing_folders_are_created_by_the_cli_as_by_save(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "factories:linear", "-o", "new/deep/m.onnx", "--report", "new/r/r.sarif"]
    assert main(argv) == 0, capfd.readouterr().err
    assert (work / "new/deep/m.onnx").is_file()
    assert_valid_sarif(json.loads((work / "new/r/r.sarif").read_text()))
    torch.manual_seed(0)
    model, (x,) = torch.nn.Linear(4, 3), (torch.randn(2, 4),)
    program = onnx_export.dynamo_export(model, x)
    saved = program.save(work / "other/deeper/m.onnx")  # the API does the same
    for path in (work / "new/deep/m.onnx", saved):
        got = onnx_export.load(path)(x)
        np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), atol=1e-5)
    np.savez(work / "in.npz", input=x.numpy())
    assert main(["run", "m_missing.onnx", "--inputs", "in.npz"]) == 2  # still checked
    capfd.readouterr()
    argv = ["run", "new/deep/m.onnx", "--inputs", "in.npz", "--output", "outs/a/o.npz"]
    assert main(argv) == 0
    assert (work / "outs/a/o.npz").is_file()


REPORTED = """
import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        return x.nonzero() if x.sum() > 0 else x


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.linear(x)) * 2


def small():
    torch.manual_seed(0)
    return Small(), (torch.randn(2, 4),)


def data_dependent():
    return Branchy(), (torch.randn(3),)


def fixed_batch():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x.reshape(2, 6)

    return Fixed(), (torch.randn(2, 6),)
"""


def _results(path: pathlib.Path) -> list[dict[str, object]]:
    log = json.loads(path.read_text())
    assert_valid_sarif(log)
    results: list[dict[str, object]] = log["runs"][0]["results"]
    return results


def _uris(results: list[dict[str, object]]) -> set[str]:
    return {
        loc["physicalLocation"]["artifactLocation"]["uri"]  # type: ignore[index]
        for r in results
        for loc in r.get("locations", [])  # type: ignore[attr-defined]
    }


def test_export_report_has_the_notes_and_locations_in_the_users_code(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (work / "reported.py").write_text(REPORTED)
    argv = ["export", "reported:small", "-o", "s.onnx", "--report", "s.sarif"]
    assert main(argv) == 0, capfd.readouterr().err
    results = _results(work / "s.sarif")
    rules = {r["ruleId"] for r in results}
    assert {"OXE0002", "OXE0003", "OXE0004", "OXE0010"} <= rules or {
        "OXE0002",
        "OXE0004",
    } <= rules, rules  # capture, decomposition, each dispatch decision: as `demo` records
    assert len(results) >= 5
    uris = _uris(results)
    assert uris and all(u.endswith("reported.py") for u in uris), uris
    from onnx_export.cli._factory import call_factory

    call = call_factory("reported:small")
    model, (x,) = call.model, call.args
    got = onnx_export.load(work / "s.onnx")(x)
    np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), atol=1e-5)


def test_a_failed_cli_export_locates_at_the_users_code(work: pathlib.Path) -> None:
    """Run as the console script is (no user frame on the stack): the model's own file."""
    (work / "reported.py").write_text(REPORTED)
    script = textwrap.dedent(
        """
        import sys
        from onnx_export.cli import main
        codes = [
            main(["export", "reported:data_dependent", "-o", "a.onnx", "--report", "a.sarif"]),
            main(["export", "reported:fixed_batch", "-o", "b.onnx", "--report", "b.sarif",
                  "--dynamic", "x:0=b"]),
        ]
        print("codes:", codes)
        """
    )
    script_path = pathlib.Path(sysconfig.get_paths()["scripts"]) / "onnx-export"
    result = subprocess.run(  # frames: the command's, ours, torch's; none in a user file
        [sys.executable, "-c", script],
        cwd=work,
        env={**os.environ, "PYTHONPATH": f"{PROJECT_ROOT}{os.pathsep}{work}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "codes: [1, 1]" in result.stdout, result.stdout + result.stderr
    for report in ("a.sarif", "b.sarif"):
        uris = _uris(_results(work / report))
        assert uris, f"{report}: the failure has no location"
        assert all(u.endswith("reported.py") for u in uris), (report, uris)
        assert not any(str(script_path) in u or "contextlib" in u for u in uris)


LOUD = """
import logging
import sys

import torch


class Loud(torch.nn.Module):
    def forward(self, x):
        logging.getLogger("torch._guards").error("probe: torch logged this")
        print("probe: torch printed this", file=sys.stderr)
        return x + 1


def loud():
    return Loud(), (torch.randn(2),)
"""


def test_torch_logs_show_only_with_verbose(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (work / "loud.py").write_text(LOUD)
    handler = logging.StreamHandler(sys.__stderr__)  # as torch's own handler: on fd 2
    logging.getLogger("torch").addHandler(handler)
    try:
        assert main(["export", "loud:loud", "-o", "q.onnx"]) == 0
        quiet = capfd.readouterr().err
        assert main(["-v", "export", "loud:loud", "-o", "v.onnx"]) == 0
        verbose = capfd.readouterr().err
    finally:
        logging.getLogger("torch").removeHandler(handler)
    assert "probe" not in quiet, quiet
    assert "probe: torch logged this" in verbose and "probe: torch printed this" in verbose
    x = torch.randn(2)
    np.testing.assert_allclose(np.asarray(onnx_export.load(work / "v.onnx")(x)), (x + 1).numpy())
