"""The package as users install it: one import root, and a runtime that needs no torch.

- No file is imported under two names, and no top-level ``adapters``/``diagnostics`` module
  is ever loaded (those names belong to other projects).
- A user's own ``adapters.py`` and ``diagnostics.py`` beside their script break nothing.
- The wheel's only top-level name is ``onnx_export``; installed without extras into a fresh
  virtual environment with no torch (beside a stand-in for AdapterHub's ``adapters``
  distribution), it loads a model exported here and runs it with nested inputs.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import venv
import zipfile

import numpy as np
import pytest
import torch

import onnx_export

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **env},
    )


def test_no_file_is_imported_under_two_names(tmp_path: pathlib.Path) -> None:
    code = textwrap.dedent(
        """
        import importlib, json, os, pkgutil, sys
        import onnx_export
        for info in pkgutil.walk_packages(onnx_export.__path__, "onnx_export."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        files = {}
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if path and name.split(".")[0] in {"onnx_export", "adapters", "diagnostics"}:
                files.setdefault(os.path.realpath(path), []).append(name)
        print(json.dumps(files))
        """
    )
    result = _run([sys.executable, "-c", code], tmp_path, PYTHONPATH=str(PROJECT_ROOT))
    assert result.returncode == 0, result.stderr
    files: dict[str, list[str]] = json.loads(result.stdout)
    twice = {path: names for path, names in files.items() if len(names) > 1}
    assert not twice, f"files imported under two names: {twice}"
    names = [name for names in files.values() for name in names]
    assert all(name.split(".")[0] == "onnx_export" for name in names), names
    assert {"onnx_export.adapters._runtime", "onnx_export.diagnostics._context"} <= set(names)
    assert len(files) > 80  # the walk reached the whole package


_SHADOW = "raise ImportError('this is the user\\'s own {name}.py, not onnx-export\\'s')\n"

_USER_SCRIPT = """
import torch
import onnx_export

program = onnx_export.dynamo_export(torch.nn.Linear(3, 2), torch.randn(4, 3))
program.save("m.onnx")
program.save_diagnostics("m.sarif")
x = torch.randn(4, 3)
loaded = onnx_export.load("m.onnx")
print(abs(loaded(x.numpy()) - program(x).numpy()).max() < 1e-5)
"""


def test_a_users_adapters_and_diagnostics_modules_break_nothing(tmp_path: pathlib.Path) -> None:
    for name in ("adapters", "diagnostics"):
        (tmp_path / f"{name}.py").write_text(_SHADOW.format(name=name))
    (tmp_path / "script.py").write_text(_USER_SCRIPT)
    result = _run([sys.executable, "script.py"], tmp_path, PYTHONPATH=str(PROJECT_ROOT))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert (tmp_path / "m.sarif").is_file()


# -- the wheel, installed without extras ------------------------------------------------------

_STANDIN_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "adapters"
version = "99.0"

[tool.setuptools]
packages = ["adapters"]
"""


class Nested(torch.nn.Module):
    """Nested inputs, a constant and a dict output: what the adapters must carry."""

    def forward(
        self, x: torch.Tensor, extras: dict[str, list[torch.Tensor]], *, scale: float = 1.0
    ) -> dict[str, torch.Tensor | tuple[torch.Tensor, ...]]:
        a, b = extras["pair"]
        return {"sum": x * scale + a, "pair": (a - b, (b * x).sum(-1))}


def _pip(venv_dir: pathlib.Path, *args: str) -> None:
    result = _run([str(venv_dir / "bin" / "python"), "-m", "pip", "install", "-q", *args], venv_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def _wheel(source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    args = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)]
    result = _run(args, source)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, pathlib.Path]:
    """A fresh venv with the stand-in ``adapters`` and our wheel, no extras, no torch."""
    work = tmp_path_factory.mktemp("packaging")
    standin = work / "adapters-standin"
    (standin / "adapters").mkdir(parents=True)
    (standin / "pyproject.toml").write_text(_STANDIN_PYPROJECT)
    (standin / "adapters" / "__init__.py").write_text("STANDIN = 'AdapterHub stand-in'\n")
    wheels = work / "wheels"
    standin_wheel = _wheel(standin, wheels / "standin")
    our_wheel = _wheel(PROJECT_ROOT, wheels / "ours")
    venv_dir = work / "venv"
    venv.create(venv_dir, with_pip=True)
    _pip(venv_dir, str(standin_wheel))
    _pip(venv_dir, str(our_wheel))
    return venv_dir, our_wheel


def test_the_wheels_only_top_level_name_is_onnx_export(
    runtime_venv: tuple[pathlib.Path, pathlib.Path],
) -> None:
    _, wheel = runtime_venv
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["onnx_export"]
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        ]
    roots = {name.split("/")[0] for name in names if not name.split("/")[0].endswith("-info")}
    assert roots == {"onnx_export"}
    assert "onnx_export/diagnostics/sarif/schema/sarif-schema-2.1.0.json" in names
    assert sorted(r.split(">")[0].split("=")[0] for r in requires) == [
        "numpy",
        "onnx",
        "onnxruntime",
    ]


_RUNTIME_SCRIPT = """
import importlib, json, sys
import numpy as np

try:
    import torch  # noqa: F401
except ImportError:
    pass
else:
    sys.exit("torch is installed in the runtime-only venv")

import onnx_export

adapters = importlib.import_module("adapters")  # the stand-in for AdapterHub's package
assert adapters.STANDIN == "AdapterHub stand-in", adapters.__file__
module = onnx_export.load("nested.onnx")
data = np.load("inputs.npz")
extras = {"pair": [data["a"], data["b"]]}
out = module(data["x"], extras, scale=2.0)
expected = np.load("expected.npz")
diffs = {
    "sum": float(abs(out["sum"] - expected["sum"]).max()),
    "pair.0": float(abs(out["pair"][0] - expected["pair0"]).max()),
    "pair.1": float(abs(out["pair"][1] - expected["pair1"]).max()),
}
try:
    onnx_export.dynamo_export
except Exception as e:
    message = f"{type(e).__name__}: {e}"
else:
    message = "dynamo_export imported without torch"
print(json.dumps({"diffs": diffs, "export": message}))
"""


def test_the_runtime_install_runs_a_model_without_torch(
    runtime_venv: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    venv_dir, _ = runtime_venv
    x, a, b = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    model = Nested()
    program = onnx_export.dynamo_export(model, x, {"pair": [a, b]}, scale=2.0)
    program.save(tmp_path / "nested.onnx")
    with torch.no_grad():
        expected = model(x, {"pair": [a, b]}, scale=2.0)
    np.savez(tmp_path / "inputs.npz", x=x.numpy(), a=a.numpy(), b=b.numpy())
    np.savez(
        tmp_path / "expected.npz",
        sum=expected["sum"].numpy(),
        pair0=expected["pair"][0].numpy(),
        pair1=expected["pair"][1].numpy(),
    )
    (tmp_path / "check.py").write_text(_RUNTIME_SCRIPT)
    python = str(venv_dir / "bin" / "python")
    result = _run([python, "check.py"], tmp_path, PYTHONPATH="")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert max(report["diffs"].values()) < 1e-5, report
    assert "onnx-export[export]" in report["export"], report["export"]

    info = _run([str(venv_dir / "bin" / "onnx-export"), "info", "nested.onnx"], tmp_path)
    assert info.returncode == 0, info.stderr
    assert "extras.pair.0" in info.stdout
    standin = _run([python, "-c", "import adapters; print(adapters.STANDIN)"], tmp_path)
    assert standin.stdout.strip() == "AdapterHub stand-in"
