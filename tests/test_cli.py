"""The ``onnx-export`` command line, run as users run it: ``python -m onnx_export ...``.

Every command is run at least once in a real subprocess; a few extra error cases call
``onnx_export.cli.main`` in this process, where torch is already imported (faster).
Exit codes: 0 success, 1 the work failed, 2 the command line cannot be used; errors are one
message on stderr, never a traceback.
"""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import onnx_export
from onnx_export.cli import _common as _cli_common
from onnx_export.cli import _factory as _cli_factory
from onnx_export.cli import main

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]

FACTORIES = """
import torch


class Nested(torch.nn.Module):
    def forward(self, x, cache, *, scale: float = 1.0, mask=None):
        return {"y": x * scale + cache[0], "z": (cache[1] - x,)}


def linear(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
    return model, (torch.randn(3, 4),)


def other_linear():
    return linear(seed=1)


def linear_tanh():
    model, args = linear(seed=0)
    model[1] = torch.nn.Tanh()  # the same weights as linear's, another activation
    return model, args


def nested():
    x, c0, c1 = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    return Nested(), (x, [c0, c1]), {"scale": 3.0}


def unsupported():
    @torch.library.custom_op("cli_test::opaque", mutates_args=())
    def opaque(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    @opaque.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    class Opaque(torch.nn.Module):
        def forward(self, x):
            return opaque(x)  # a custom op without an ONNX function

    return Opaque(), (torch.randn(3),)


def grid_sample():
    class Sample(torch.nn.Module):
        def forward(self, x, grid):
            return torch.nn.functional.grid_sample(x, grid, align_corners=False)

    return Sample(), (torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1)


def returns_a_model():
    return torch.nn.ReLU()


def args_not_a_tuple():
    return torch.nn.ReLU(), torch.randn(2)


def raises():
    return 1 / 0  # the line the error names


NOT_CALLABLE = 3
"""


def _command(args: tuple[str | os.PathLike[str], ...], cwd: pathlib.Path) -> dict[str, Any]:
    """``python -m onnx_export ARGS`` in ``cwd``, importing this checkout first."""
    return {
        "args": [sys.executable, "-m", "onnx_export", *map(str, args)],
        "cwd": cwd,
        "env": {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "TMPDIR": str(cwd)},
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
    }


def cli(*args: str | os.PathLike[str], cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m onnx_export ARGS`` in ``cwd`` and wait for it."""
    return subprocess.run(**_command(args, cwd), timeout=600, check=False)


def assert_error(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    """Exit ``code``, each fragment in stderr, and no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in stderr:\n{result.stderr}"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A folder with ``factories.py``, a broken module, inputs, and two exported models."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "factories.py").write_text(FACTORIES)
    (folder / "broken.py").write_text("def make(:\n    pass\n")
    (folder / "garbage.onnx").write_text("not a model")
    (folder / "garbage.npz").write_text("not an npz")
    np.savez(folder / "linear_inputs.npz", input=np.ones((5, 4), np.float32))
    ones = np.ones((2, 3), np.float32)
    np.savez(folder / "by_graph_name.npz", x=ones, **{"cache.0": ones, "cache.1": 2 * ones})
    exported = cli(
        "export", "factories:linear", "-o", "linear.onnx", "--dynamic", "input:0=batch",
        "--report", "linear.sarif", cwd=folder,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    (folder / "linear.out").write_text(exported.stdout)
    with pytest.MonkeyPatch.context() as patch:  # in this process, where torch is loaded
        patch.chdir(folder)
        nested = ["export", "factories.py:nested", "-o", "nested.onnx", "--opset", "20"]
        assert main(nested) == 0
    return folder


# -- help and usage --------------------------------------------------------------------

COMMANDS = ["export", "verify", "run", "info", "diagnostics", "doctor", "env", "demo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: onnx-export ")


def test_top_level_help_lists_every_command(tmp_path: pathlib.Path) -> None:
    result = cli("--help", cwd=tmp_path)  # as a user runs it: python -m onnx_export
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: onnx-export"), result.stdout
    for command in COMMANDS:
        assert command in result.stdout


BAD_ARGUMENTS = {
    "no command": ([], "required: COMMAND"),
    "unknown command": (["bogus"], "unknown command 'bogus'"),
    "export without -o": (["export", "factories:linear"], "-o/--output"),
    "factory without colon": (["export", "factories", "-o", "m.onnx"], "MODULE:FACTORY"),
    "module not found": (["export", "no_such_module:make", "-o", "m.onnx"], "no module named"),
    "file not found": (["export", "missing.py:make", "-o", "m.onnx"], "is not a file"),
    "syntax error": (["export", "broken.py:make", "-o", "m.onnx"], "SyntaxError"),
    "bad dynamic": (["export", "f:g", "-o", "m.onnx", "--dynamic", "x=0"], "NAME:AXIS=DIM"),
    "opset too low": (["export", "f:g", "-o", "m.onnx", "--opset", "7"], "supported opsets"),
    "opset not a number": (["export", "f:g", "-o", "m.onnx", "--opset", "x"], "invalid int"),
    "run missing model": (["run", "nope.onnx", "--inputs", "i.npz"], "'nope.onnx' does not exist"),
    "run missing inputs": (["run", "linear.onnx", "--inputs", "nope.npz"], "does not exist"),
    "run bad npz": (["run", "linear.onnx", "--inputs", "garbage.npz"], "not an .npz file"),
    "run bad provider": (["run", "linear.onnx", "--inputs", "i.npz", "--provider", "tpu"], "tpu"),
    "info missing model": (["info", "nope.onnx"], "does not exist"),
    "info not onnx": (["info", "garbage.onnx"], "not a readable ONNX model"),
    "verify missing model": (["verify", "factories:linear", "nope.onnx"], "does not exist"),
    "diagnostics missing report": (["diagnostics", "nope.sarif"], "nope.sarif"),
}


@pytest.mark.parametrize(
    ("argv", "fragment"), list(BAD_ARGUMENTS.values()), ids=list(BAD_ARGUMENTS)
)
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str],
    fragment: str,
    work: pathlib.Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In this process (``tests/test_cli_errors.py`` has the full table of mistakes)."""
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err and fragment in err, err


@pytest.mark.parametrize(
    ("factory", "fragment"),
    [
        ("factories:nope", "has no attribute 'nope'"),
        ("factories:NOT_CALLABLE", "not a callable factory"),
        ("factories:returns_a_model", "must return (model, args) or (model, args, kwargs)"),
        ("factories:args_not_a_tuple", "args must be a tuple"),
        ("factories:raises", "ZeroDivisionError: division by zero (at factories.py:"),
    ],
)
def test_factory_mistakes_exit_2(
    factory: str, fragment: str, work: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        patch.syspath_prepend(str(work))
        assert main(["export", factory, "-o", "m.onnx"]) == 2
    assert fragment in capsys.readouterr().err


def test_dynamic_parsing() -> None:
    parsed = _cli_factory.parse_dynamic(["x:0=batch", "x:1=seq", "mask:0=batch"])
    assert parsed == {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch"}}
    with pytest.raises(_cli_common.UsageError, match="named twice"):
        _cli_factory.parse_dynamic(["x:0=batch", "x:0=other"])


# -- export ----------------------------------------------------------------------------


def test_export_writes_the_model_and_the_report(work: pathlib.Path) -> None:
    assert "Exported Sequential to" in (work / "linear.out").read_text()
    assert (work / "linear.onnx").is_file()
    assert (work / "linear.sarif").is_file()  # --report writes it even on success


def test_failing_export_exits_1_and_names_the_report(work: pathlib.Path) -> None:
    result = cli("export", "factories:unsupported", "-o", "bad.onnx", cwd=work)
    assert_error(result, 1, "cli_test::opaque", "SARIF")
    report = pathlib.Path(
        result.stderr.split("The full diagnostic report (SARIF) is at: ")[1].split()[0]
    )
    assert report.is_file() and report.suffix == ".sarif"
    assert not (work / "bad.onnx").exists()
    summary = cli("diagnostics", report, cwd=work)
    assert summary.returncode == 1 and "OXE0006" in summary.stdout


def test_export_at_an_older_opset(work: pathlib.Path) -> None:
    import onnx

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        assert main(["export", "factories.py:linear", "-o", "linear13.onnx", "--opset", "13"]) == 0
    opsets = [o.version for o in onnx.load(work / "linear13.onnx").opset_import if not o.domain]
    assert opsets == [13]


def test_an_op_newer_than_the_asked_opset_exits_1_naming_it(work: pathlib.Path) -> None:
    result = cli("export", "factories:grid_sample", "-o", "g.onnx", "--opset", "15", cwd=work)
    assert_error(result, 1, "GridSample", "factories.py:", "lowest opset that has it is 16")
    assert result.stderr.count("error:") == 1 and not (work / "g.onnx").exists()


# -- info ------------------------------------------------------------------------------


def test_info_describes_the_model(work: pathlib.Path) -> None:
    result = cli("info", "linear.onnx", cwd=work)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for fragment in [
        "input  float32[batch, 4]",
        "output  float32[batch, 2]",
        "opsets: ai.onnx ",
        "parameters: 10 in 2 initializers, 40 B",
        "forward(input)",
        "file: linear.onnx (",
    ]:
        assert fragment in out, out


def test_info_shows_the_adapter_of_nested_inputs(work: pathlib.Path) -> None:
    out = cli("info", "nested.onnx", cwd=work).stdout
    assert "forward(x, cache, *, scale=1.0, mask=None)" in out
    assert "cache[1] -> cache.1" in out and "scale = 3.0 (constant)" in out
    assert "output structure: {'y': *, 'z': (*,)}" in out
    assert "opsets: ai.onnx 20" in out


def test_info_lists_external_data(work: pathlib.Path) -> None:
    import onnx

    model = onnx.load(work / "linear.onnx")
    onnx.save(
        model,
        work / "external.onnx",
        save_as_external_data=True,
        location="external.onnx.data",
        size_threshold=0,
    )
    out = cli("info", "external.onnx", cwd=work).stdout
    assert "external data:" in out and "external.onnx.data" in out


# -- run -------------------------------------------------------------------------------


def test_run_prints_the_outputs(work: pathlib.Path) -> None:
    result = cli("run", "linear.onnx", "--inputs", "linear_inputs.npz", cwd=work)
    assert result.returncode == 0, result.stderr
    assert "output: float32[5, 2]" in result.stdout
    assert "CPUExecutionProvider" in result.stdout


def test_run_rebuilds_nested_inputs_from_graph_names(work: pathlib.Path) -> None:
    result = cli(
        "run", "nested.onnx", "--inputs", "by_graph_name.npz", "--output", "out.npz", cwd=work
    )
    assert result.returncode == 0, result.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert (work / "out.npz").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    with np.load(work / "out.npz") as saved:
        assert saved.files == ["y", "z.0"]
        np.testing.assert_allclose(saved["y"], np.full((2, 3), 4.0))  # 1 * 3.0 + 1
        np.testing.assert_allclose(saved["z.0"], np.ones((2, 3)))  # 2 - 1


def test_run_takes_forward_parameter_names(
    work: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.savez(work / "by_parameter.npz", input=np.ones((2, 4), np.float32))
    assert main(["run", str(work / "linear.onnx"), "--inputs", str(work / "by_parameter.npz")]) == 0
    assert "output: float32[2, 2]" in capsys.readouterr().out


def test_run_with_inputs_that_do_not_fit_exits_1(
    work: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.savez(work / "wrong.npz", x=np.ones((2, 3), np.float32), other=np.ones(1))
    assert main(["run", str(work / "nested.onnx"), "--inputs", str(work / "wrong.npz")]) == 1
    err = capsys.readouterr().err
    assert "neither graph inputs" in err and "cache.0" in err


def test_run_with_a_graph_input_missing_names_it(
    work: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An .npz keyed by graph names but short of one says which one is missing."""
    ones = np.ones((2, 3), np.float32)
    np.savez(work / "short.npz", x=ones, **{"cache.0": ones})
    assert main(["run", str(work / "nested.onnx"), "--inputs", str(work / "short.npz")]) == 1
    err = capsys.readouterr().err
    assert "lacks the graph inputs ['cache.1']" in err, err
    assert "neither" not in err and "Traceback" not in err


def test_run_and_info_without_adapter_metadata(
    work: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnx

    model = onnx.load(work / "linear.onnx")
    del model.metadata_props[:]
    onnx.save(model, work / "flat.onnx")
    assert main(["info", str(work / "flat.onnx")]) == 0
    assert "adapter: none" in capsys.readouterr().out
    run = ["run", str(work / "flat.onnx"), "--inputs", str(work / "linear_inputs.npz")]
    assert main(run) == 0
    assert "output: float32[5, 2]" in capsys.readouterr().out


# -- verify ----------------------------------------------------------------------------


def test_verify_matches(work: pathlib.Path) -> None:
    result = cli("verify", "factories:linear", "linear.onnx", cwd=work)
    assert result.returncode == 0, result.stderr
    assert "max abs error" in result.stdout and "All 1 outputs match." in result.stdout


def test_verify_mismatch_exits_1(work: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(work))
        code = main(["verify", "factories:other_linear", str(work / "linear.onnx")])
    captured = capsys.readouterr()
    assert code == 1
    assert "differ beyond tolerance" in captured.err and "NO" in captured.out
    # the weights differ from the file's: the line says so and how to seed the factory
    assert "other weights than" in captured.err and "'0.weight', '0.bias'" in captured.err
    assert "torch.manual_seed(0)" in captured.err


def test_verify_mismatch_with_the_same_weights_names_no_weights(
    work: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(work))
        code = main(["verify", "factories:linear_tanh", str(work / "linear.onnx")])
    captured = capsys.readouterr()
    assert code == 1
    assert "differ beyond tolerance" in captured.err and "other weights" not in captured.err


# -- doctor ----------------------------------------------------------------------------


def test_doctor_prints_the_environment(tmp_path: pathlib.Path) -> None:
    result = cli("doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for label in ("torch", "onnxscript", "onnx-ir", "onnx", "onnxruntime", "providers"):
        assert f"\n{label} " in f"\n{result.stdout}"
    assert "Export supported here: yes" in result.stdout


# -- the status line -------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_line_only_on_a_terminal() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        with _cli_common.Status(stream)("Exporting Net"):
            pass
    assert terminal.getvalue() == "\rExporting Net ...\x1b[K\r\x1b[K"
    assert pipe.getvalue() == ""


def test_demo(tmp_path: pathlib.Path) -> None:
    """The README's first command."""
    result = cli("demo", "-o", "demo.onnx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Result: outputs match PyTorch." in result.stdout
    assert (tmp_path / "demo.onnx").is_file() and (tmp_path / "demo.sarif").is_file()


def test_a_module_of_the_same_name_from_another_folder_is_not_reused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # In one process, `factories` imported from folder a must not answer for folder b's
    # `factories.py` once b is the one on sys.path (xdist ran test_cli.py after another
    # file's `factories` module, and `verify` got that module's model).
    outputs = []
    for name, width in (("a", 4), ("b", 8)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "factories.py").write_text(
            "import torch\n\n\ndef make():\n"
            f"    return torch.nn.Linear({width}, 2), (torch.randn(3, {width}),)\n"
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.syspath_prepend(str(folder))
            out = folder / "m.onnx"
            assert main(["export", "factories:make", "-o", str(out)]) == 0
        outputs.append(onnx_export.load(out))
    capsys.readouterr()
    for model, width in zip(outputs, (4, 8), strict=True):
        x = np.ones((3, width), np.float32)
        assert model(x).shape == (3, 2)
