"""The two sides of ``onnx_export.hf``: the runtime a deployment installs never imports torch.

Every import statement (lazy ones inside functions too) of every module the runtime side
reaches is read with ``ast``: the modules under ``onnx_export/hf/runtime/``, and the shared
leaves they import (``hf/_errors.py``, ``hf/_tasks.py``, ...), followed through the
``onnx_export`` modules they name. The test fails when one of them imports torch,
transformers or another export-time library, or the export side ``onnx_export.hf.export``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "onnx_export"
HF = PACKAGE / "hf"
RUNTIME = HF / "runtime"

#: Libraries only the export side may import (the ``export``/``hf`` extras).
EXPORT_ONLY = (
    "torch",
    "transformers",
    "safetensors",
    "onnxscript",
    "onnx_ir",
    "onnx_export.hf.export",
)
#: ``onnx_export`` modules outside ``hf`` that the runtime may reach (torch-free themselves).
ALLOWED_OUTSIDE_HF = ("onnx_export.errors", "onnx_export.adapters", "onnx_export.diagnostics")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _path(module: str) -> Path | None:
    base = PACKAGE.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> Iterator[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                yield full if _path(full) else source


def _reached() -> dict[str, set[str]]:
    """Each ``onnx_export`` module the runtime reaches, with everything it imports."""
    todo = [_module_name(p) for p in sorted(RUNTIME.rglob("*.py"))]
    seen: dict[str, set[str]] = {}
    while todo:
        module = todo.pop()
        path = _path(module)
        if module in seen or path is None:
            continue
        seen[module] = set(_imports(path))
        for target in seen[module]:
            inside_hf = target.startswith("onnx_export.hf") and not target.startswith(
                "onnx_export.hf.export"
            )
            if inside_hf and target not in seen:
                todo.append(target)
    return seen


REACHED = _reached()


def _is(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", sorted(REACHED))
def test_the_runtime_side_imports_no_export_library(module: str) -> None:
    bad = sorted(t for t in REACHED[module] if _is(t, EXPORT_ONLY))
    assert not bad, (
        f"{module} is on the runtime side (torch-free) but imports {bad}. Move that code to "
        "onnx_export/hf/export/, or pass the value in from the export side."
    )


@pytest.mark.parametrize("module", sorted(REACHED))
def test_the_runtime_side_reaches_only_torch_free_parts_of_the_exporter(module: str) -> None:
    outside = sorted(
        t
        for t in REACHED[module]
        if t.startswith("onnx_export")
        and not t.startswith("onnx_export.hf")
        and not _is(t, ALLOWED_OUTSIDE_HF)
    )
    assert not outside, f"{module} imports {outside}, which may import torch"


def test_the_check_follows_the_runtime_and_would_catch_a_torch_import() -> None:
    assert "onnx_export.hf.runtime.generation._causal" in REACHED
    assert "onnx_export.hf._errors" in REACHED  # a shared leaf, reached from the runtime
    assert not any(m.startswith("onnx_export.hf.export") for m in REACHED)
    export_side = set(_imports(HF / "export" / "_export.py"))
    assert any(_is(t, EXPORT_ONLY) for t in export_side)


def test_the_sides_are_packages() -> None:
    for side in ("export", "export/graphs", "runtime", "runtime/models", "runtime/generation"):
        assert (HF / side / "__init__.py").is_file(), side
    assert not [p.name for p in HF.glob("_*.py") if p.name.startswith(("_graphs", "_models"))]
