"""Every ``onnx-export`` subcommand, driven through the ways users get it wrong.

Each case runs ``onnx_export.cli.main`` in this process (``capfd`` sees both Python's
stderr and file descriptor 2, where torch's C++ logs would go) and asserts the documented
exit code (1 the work failed, 2 the command line or an input file cannot be used), exactly
one line on stderr with the expected words, and no traceback anywhere. A few cases run in
a subprocess: those that need a process where torch cannot be imported.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import onnx_export
from onnx_export.cli import main
from tests.helpers import assert_onnx_program_close

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]

FACTORIES = """
import torch


class Nested(torch.nn.Module):
    def forward(self, x, cache, *, scale: float = 1.0):
        return {"y": x * scale + cache[0], "z": (cache[1] - x,)}


def linear(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(8, 3), (torch.randn(2, 8),)


def other_linear():
    return linear(seed=1)


def nested():
    x, c0, c1 = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    return Nested(), (x, [c0, c1]), {"scale": 3.0}


def unsupported():
    @torch.library.custom_op("cli_errors::opaque", mutates_args=())
    def opaque(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    @opaque.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    class Opaque(torch.nn.Module):
        def forward(self, x):
            return opaque(x)

    return Opaque(), (torch.randn(3),)


def data_dependent():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x.nonzero() if x.sum() > 0 else x

    return Branchy(), (torch.randn(3),)


def model_raises():
    class Raises(torch.nn.Module):
        def forward(self, x):
            raise ValueError("broken forward")

    return Raises(), (torch.randn(3),)


def bf16():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).to(torch.bfloat16), (torch.randn(2, 4, dtype=torch.bfloat16),)


def raises():
    return 1 / 0


def sized(batch):
    return torch.nn.Linear(4, 2), (torch.randn(batch, 4),)
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Factories, two exported models, and good, empty and broken input files."""
    folder = tmp_path_factory.mktemp("cli_errors")
    (folder / "factories.py").write_text(FACTORIES)
    (folder / "empty.onnx").write_bytes(b"")
    (folder / "garbage.onnx").write_text("not a model")
    (folder / "empty.npz").write_bytes(b"")
    (folder / "garbage.npz").write_text("not an npz")
    (folder / "empty.sarif").write_bytes(b"")
    (folder / "garbage.sarif").write_text("{not json")
    (folder / "a_folder").mkdir()
    np.save(folder / "one_array.npy", np.ones(3))
    (folder / "one_array.npy").rename(folder / "one_array.npz")
    torch.manual_seed(0)
    linear, example = torch.nn.Linear(8, 3), torch.randn(2, 8)
    program = onnx_export.dynamo_export(linear, example)
    assert_onnx_program_close(program, linear, example)
    program.save(folder / "linear.onnx")
    program.save(folder / "exported" / "model.onnx")  # a folder that holds a model
    torch.manual_seed(0)  # as factories:bf16
    half = torch.nn.Linear(4, 2).to(torch.bfloat16)
    onnx_export.dynamo_export(half, torch.randn(2, 4, dtype=torch.bfloat16)).save(
        folder / "bf16.onnx"
    )  # checked against PyTorch by test_verify_upcasts_a_bfloat16_model
    x, c0, c1 = (torch.ones(2, 3) * i for i in (1, 1, 2))
    nested_model = _nested_model()
    nested = onnx_export.dynamo_export(nested_model, x, [c0, c1], scale=3.0)
    assert_onnx_program_close(nested, nested_model, x, [c0, c1], scale=3.0)
    nested.save(folder / "nested.onnx")
    ones = np.ones((2, 3), np.float32)
    by_name = {"x": ones, "cache.0": ones, "cache.1": 2 * ones}
    np.savez(folder / "nested.npz", **by_name)
    np.savez(folder / "same_constant.npz", **by_name, scale=np.array(3.0))
    np.savez(folder / "other_constant.npz", **by_name, scale=np.array(2.0))
    np.savez(folder / "wrong_keys.npz", x=ones, other=ones)
    np.savez(folder / "wrong_shape.npz", input=np.ones((2, 5), np.float32))
    np.savez(folder / "linear.npz", input=np.ones((2, 8), np.float32))
    return folder


def _nested_model() -> torch.nn.Module:
    namespace: dict[str, object] = {}
    exec(compile(FACTORIES, "factories.py", "exec"), namespace)
    return namespace["Nested"]()  # type: ignore[operator,no-any-return]  # a class


# id: (the command line after `onnx-export`, exit code, words the one stderr line must hold)
CASES = {
    # the command line itself
    "no command": ("", 2, "required: COMMAND"),
    "unknown command": ("bogus", 2, "unknown command 'bogus'; the commands are export"),
    "mistyped command": ("exprot factories:linear -o m.onnx", 2, "did you mean 'export'?"),
    "mistyped command after -v": ("-v dcotor", 2, "did you mean 'doctor'?"),
    "unknown option": ("info linear.onnx --bogus", 2, "onnx-export info: error: unrecognized"),
    "doctor extra argument": ("doctor now", 2, "unrecognized arguments"),
    # export
    "export factory without colon": ("export factories -o m.onnx", 2, "MODULE:FACTORY"),
    "export factory with parameters": (
        "export factories:sized -o m.onnx",
        2,
        "factories:sized takes the arguments ['batch'], but a factory is called with none",
    ),
    "export module missing": ("export nope:make -o m.onnx", 2, "no module named"),
    "export factory missing": ("export factories:nope -o m.onnx", 2, "no attribute"),
    "export factory raises": ("export factories:raises -o m.onnx", 2, "ZeroDivision"),
    "export -o folder": ("export factories:linear -o a_folder", 2, "a_folder' is a folder"),
    "export -o under a file": (
        "export factories:linear -o linear.npz/m.onnx",
        2,
        "linear.npz' is a file, not a folder",
    ),
    "export --report under a file": (
        "export factories:linear -o m.onnx --report linear.npz/r.sarif",
        2,
        "--report",
    ),
    "export bad opset": ("export factories:linear -o m.onnx --opset 7", 2, "supported opsets are"),
    "export opset not a number": ("export factories:linear -o m.onnx --opset x", 2, "invalid int"),
    "export bad --dynamic": ("export factories:linear -o m.onnx --dynamic x=0", 2, "NAME:AXIS=DIM"),
    "export --dynamic unknown input": (
        "export factories:linear -o m.onnx --dynamic nope:0=b",
        2,
        "nope",
    ),
    "export unsupported op": ("export factories:unsupported -o m.onnx", 1, "cli_errors::opaque"),
    "export capture fails": ("export factories:data_dependent -o m.onnx", 1, "could not capture"),
    # verify
    "verify model missing": ("verify factories:linear nope.onnx", 2, "does not exist"),
    "verify model empty": ("verify factories:linear empty.onnx", 2, "is empty"),
    "verify not onnx": ("verify factories:linear garbage.onnx", 2, "cannot load"),
    "verify negative atol": ("verify factories:linear linear.onnx --atol -1", 2, "--atol"),
    "verify rtol not a number": ("verify factories:linear linear.onnx --rtol x", 2, "--rtol"),
    "verify infinite atol": ("verify factories:linear linear.onnx --atol inf", 2, "finite"),
    "verify factory missing": ("verify factories:nope linear.onnx", 2, "no attribute"),
    "verify factory raises": ("verify factories:raises linear.onnx", 2, "ZeroDivision"),
    "verify model raises": ("verify factories:model_raises linear.onnx", 1, "broken forward"),
    "verify other model": (
        "verify factories:nested linear.onnx",
        1,
        "cannot run on the factory's inputs",
    ),
    "verify mismatch": ("verify factories:other_linear linear.onnx", 1, "differ beyond tolerance"),
    "verify bfloat16 on CPU": ("verify factories:bf16 bf16.onnx", 2, "--upcast bfloat16"),
    "verify bad upcast": ("verify factories:bf16 bf16.onnx --upcast int8", 2, "--upcast"),
    # run
    "run model missing": ("run nope.onnx --inputs linear.npz", 2, "does not exist"),
    "run model empty": ("run empty.onnx --inputs linear.npz", 2, "is empty"),
    "run not onnx": ("run garbage.onnx --inputs linear.npz", 2, "cannot load"),
    "run model is a folder": ("run a_folder --inputs linear.npz", 2, "is a folder"),
    "run inputs missing": ("run linear.onnx --inputs nope.npz", 2, "does not exist"),
    "run inputs empty": ("run linear.onnx --inputs empty.npz", 2, "is empty"),
    "run inputs not npz": ("run linear.onnx --inputs garbage.npz", 2, "not an .npz file"),
    "run inputs one array": ("run linear.onnx --inputs one_array.npz", 2, "np.savez"),
    "run wrong keys": ("run nested.onnx --inputs wrong_keys.npz", 1, "neither graph inputs"),
    "run wrong shape": ("run linear.onnx --inputs wrong_shape.npz", 1, "input"),
    "run other constant": (
        "run nested.onnx --inputs other_constant.npz",
        1,
        "scale = 3.0 baked in",
    ),
    "run --output under a file": (
        "run linear.onnx --inputs linear.npz --output linear.npz/dir/out.npz",
        2,
        "linear.npz' is a file, not a folder",
    ),
    "run --output folder": (
        "run linear.onnx --inputs linear.npz --output a_folder",
        2,
        "is a folder",
    ),
    "run bad provider": ("run linear.onnx --inputs linear.npz --provider tpu", 2, "tpu"),
    # info
    "info model missing": ("info nope.onnx", 2, "does not exist"),
    "info model empty": ("info empty.onnx", 2, "is empty (0 bytes)"),
    "info not onnx": ("info garbage.onnx", 2, "ONNX model"),
    "info folder": ("info a_folder", 2, "is a folder"),
    "info folder of models": ("info exported", 2, "e.g. 'exported/model.onnx'"),
    # diagnostics
    "diagnostics report missing": ("diagnostics nope.sarif", 2, "does not exist"),
    "diagnostics report empty": ("diagnostics empty.sarif", 2, "is empty"),
    "diagnostics not json": ("diagnostics garbage.sarif", 2, "garbage.sarif"),
    "diagnostics folder": ("diagnostics a_folder", 2, "is a folder"),
    # demo
    "demo -o under a file": ("demo -o linear.npz/m.onnx", 2, "is a file, not a folder"),
    "demo -o folder": ("demo -o a_folder", 2, "is a folder"),
}


@pytest.mark.parametrize(("command", "code", "words"), list(CASES.values()), ids=list(CASES))
def test_each_mistake_is_one_line_and_its_exit_code(
    command: str,
    code: int,
    words: str,
    work: pathlib.Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    assert main(shlex.split(command)) == code
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert lines[0].startswith("onnx-export"), lines[0]
    assert words in lines[0], lines[0]


def test_a_failed_export_names_its_report_and_leaves_no_model(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    argv = ["export", "factories:data_dependent", "-o", "dd.onnx", "--report", "dd.sarif"]
    assert main(argv) == 1
    err = capfd.readouterr().err
    assert "dd.sarif" in err and "onnx-export diagnostics" in err
    assert (work / "dd.sarif").is_file() and not (work / "dd.onnx").exists()


def test_verbose_shows_the_details(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    assert main(["export", "factories:data_dependent", "-o", "m.onnx", "--verbose"]) == 1
    assert len(capfd.readouterr().err.splitlines()) > 1


def test_run_accepts_a_recorded_constant_at_its_value(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    assert main(["run", "nested.onnx", "--inputs", "same_constant.npz", "--output", "out.npz"]) == 0
    with np.load(work / "out.npz") as saved:
        np.testing.assert_allclose(saved["y"], np.full((2, 3), 4.0))  # 1 * 3.0 + 1
        np.testing.assert_allclose(saved["z.0"], np.ones((2, 3)))  # 2 - 1
    assert capfd.readouterr().err == ""


def test_verify_upcasts_a_bfloat16_model(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    assert main(["verify", "factories:bf16", "bf16.onnx", "--upcast", "bfloat16"]) == 0
    out, err = capfd.readouterr()
    assert "All 1 outputs match." in out and err == ""


def test_info_counts_only_the_models_own_parameters(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", str(work / "linear.onnx")]) == 0
    out = capfd.readouterr().out
    assert "parameters: 27 in 2 initializers, 108 B" in out, out  # Linear(8, 3): 8*3 + 3
    assert main(["info", str(work / "nested.onnx")]) == 0  # x * 3.0 + c: a constant, no weight
    out = capfd.readouterr().out
    assert "parameters: not marked" in out or "parameters: 0 in 0" in out, out


def test_demo_says_where_it_writes(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--help"]) == 0
    help_text = " ".join(capfd.readouterr().out.split())
    assert "writes m.onnx and m.sarif in the current folder" in help_text


_WITHOUT_TORCH = """
import sys
for name in ("torch", "onnxscript", "onnx_ir"):
    sys.modules[name] = None  # `import torch` now fails as in an install without the extra
from onnx_export.cli import main
import onnx_export
codes = [main(argv) for argv in {commands!r}]
try:
    onnx_export.dynamo_export
except ModuleNotFoundError as e:
    print("python:", e)
print("codes:", codes)
assert "torch" not in sys.modules or sys.modules["torch"] is None
"""


def test_without_torch_the_runtime_commands_work_and_the_others_name_the_extra(
    work: pathlib.Path,
) -> None:
    commands = [
        ["info", "linear.onnx"],
        ["run", "linear.onnx", "--inputs", "linear.npz"],
        ["diagnostics", "garbage.sarif"],
        ["doctor"],
        ["export", "factories:linear", "-o", "m.onnx"],
        ["verify", "factories:linear", "linear.onnx"],
        ["demo"],
    ]
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_WITHOUT_TORCH.format(commands=commands))],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # info, run: 0; diagnostics of a broken report: 2; doctor: 1 (no export here); 2 for the rest
    assert "codes: [0, 0, 2, 1, 2, 2, 2]" in result.stdout, result.stdout + result.stderr
    assert "parameters: 27" in result.stdout and "output: float32[2, 3]" in result.stdout
    extra = [line for line in result.stderr.splitlines() if "onnx-export[export]" in line]
    assert [line.split(":")[0] for line in extra] == [
        "onnx-export doctor",
        "onnx-export export",
        "onnx-export verify",
        "onnx-export demo",
    ], result.stderr
    assert "python: onnx_export.dynamo_export needs" in result.stdout
    assert "pip install 'onnx-export[export]'" in result.stdout
