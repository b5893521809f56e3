"""diagnostics depends on the standard library only, and never on the exporter or adapters."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = PROJECT_ROOT / "diagnostics"
MODULES = sorted(PACKAGE.rglob("*.py"))
FORBIDDEN = {"onnx_export", "adapters"}


def imported_top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_package_has_modules() -> None:
    assert len(MODULES) > 5


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_module_imports_only_stdlib_and_itself(path: Path) -> None:
    names = imported_top_level_names(path)
    assert not names & FORBIDDEN, f"{path.name} imports {sorted(names & FORBIDDEN)}"
    outside = {
        name
        for name in names
        if name not in sys.stdlib_module_names and name not in {"diagnostics", "__future__"}
    }
    assert not outside, f"{path.name} imports non-stdlib modules {sorted(outside)}"


def test_importing_diagnostics_loads_no_third_party_modules() -> None:
    code = (
        "import sys, onnx_export.diagnostics, onnx_export.diagnostics.__main__\n"
        "heavy = {'torch', 'numpy', 'onnx', 'onnxscript', 'onnx_export.adapters',"
        " 'onnx_export._export', 'jsonschema'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=60,
        check=True,
    )
    assert completed.stdout.strip() == "[]"
