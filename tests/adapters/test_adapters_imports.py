"""The package never imports torch, onnx_export or diagnostics at module level, nor pickle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "adapters"
SOURCES = sorted(PACKAGE.glob("*.py"))
FORBIDDEN_AT_MODULE_LEVEL = ("torch", "onnx_export", "diagnostics", "onnx", "onnxruntime")
FORBIDDEN_ANYWHERE = ("pickle", "dill", "cloudpickle", "torch", "onnx_export", "diagnostics")


def _imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import statement."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.Import):
                found.extend((alias.name, not in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, not in_function))
            visit(child, nested)

    visit(tree, False)
    return found


@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_no_forbidden_imports(source: Path) -> None:
    for module, at_module_level in _imports(ast.parse(source.read_text())):
        root = module.split(".")[0]
        assert root not in FORBIDDEN_ANYWHERE, f"{source.name} imports {module}"
        if at_module_level:
            assert root not in FORBIDDEN_AT_MODULE_LEVEL, (
                f"{source.name} imports {module} at module level"
            )


def test_the_check_sees_the_package() -> None:
    assert {p.name for p in SOURCES} >= {"__init__.py", "_runtime.py", "input_steps.py"}
