"""The house by stage: imports go one way, from a later stage to an earlier one, never back.

Every import statement of every module under ``onnx_export/`` (``adapters/`` and
``diagnostics/`` included, lazy imports inside functions too) is read with ``ast``. The
test fails when

- a stage imports a later stage (capture never imports translation, translation never
  imports optimization, reporting or the program; ``adapters`` and ``diagnostics`` import
  nothing of the exporter), or
- two or more files import each other (a circle of any length).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "onnx_export"

#: The stages in the order data flows, each with the rank it may import up to. Modules
#: not listed (the public face: ``__init__``, ``_export``, ``cli``, ``hf``) may import all.
#: Shared leaves (rank 0) are what every stage uses: errors, options, dtypes, the
#: registry of ONNX functions, weights without data, the progress bar, the op library,
#: the graph passes, and the two independent packages.
RANKS: dict[str, int] = {
    "onnx_export.diagnostics": 0,
    "onnx_export.adapters": 0,
    "onnx_export.errors": 0,
    "onnx_export._options": 0,
    "onnx_export._dtypes": 0,
    "onnx_export._registry": 0,
    "onnx_export._fake": 0,
    "onnx_export._progress": 0,
    "onnx_export.ops": 0,
    "onnx_export.passes": 0,
    "onnx_export.capture": 1,
    "onnx_export.translation": 2,
    "onnx_export.optimization": 3,
    "onnx_export.reporting": 4,
    "onnx_export.program": 5,
}
TOP = 99
#: Packages that import nothing of the exporter (each other neither).
INDEPENDENT = ("onnx_export.adapters", "onnx_export.diagnostics")
#: Torch-free packages (what a deployment installs beside onnxruntime): each may import
#: only the listed parts of ``onnx_export`` and none of the exporter's libraries, at any
#: level (lazy imports inside functions too).
#: ``serving.openai`` runs the Hugging Face runtime (torch-free itself, as
#: ``tests/hf/test_hf_layering.py`` checks) and its shared error leaf.
TORCH_FREE = {
    "onnx_export.serving": (
        "onnx_export.serving",
        "onnx_export.adapters",
        "onnx_export.hf.runtime",
        "onnx_export.hf._errors",
    )
}
EXPORTER_LIBRARIES = ("torch", "torchvision", "transformers", "onnxscript", "onnx_ir")
#: Shared leaves that must not import the op library or the passes' users: they rank
#: with ``ops``/``passes`` but only the registry may (lazily) load the op library.
TOP_LEVEL_LIMIT = 12


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    """Every module, through the links to ``adapters/`` and ``diagnostics/`` too."""
    found: dict[str, Path] = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(folder) / name
                found[_module_name(path)] = path
    return found


MODULES = _sources()


def _imported(module: str, path: Path) -> Iterator[str]:
    """The ``onnx_export`` modules ``module`` imports (a name in a package: the module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            targets = [
                f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source
                for a in node.names
            ]
        else:
            continue
        for target in targets:
            if target.startswith("onnx_export") and target != module:
                yield target


GRAPH: dict[str, set[str]] = {
    name: {t for t in _imported(name, path) if t in MODULES} for name, path in MODULES.items()
}


def _rank(module: str) -> int:
    best = ""
    for prefix in RANKS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return RANKS[best] if best else TOP


def _stage(module: str) -> str:
    for prefix in sorted(RANKS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    return module


def _edges() -> list[tuple[str, str]]:
    return sorted((m, t) for m, targets in GRAPH.items() for t in targets)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_stage_imports_a_later_stage(module: str) -> None:
    later = [
        t for t in sorted(GRAPH[module]) if _rank(t) > _rank(module) and _stage(t) != _stage(module)
    ]
    assert not later, (
        f"{module} (stage {_stage(module)}, rank {_rank(module)}) imports a later stage: "
        + ", ".join(f"{t} (rank {_rank(t)})" for t in later)
        + ". Move the shared piece down, or pass the value in from the pipeline."
    )


@pytest.mark.parametrize("package", INDEPENDENT)
def test_independent_packages_import_nothing_of_the_exporter(package: str) -> None:
    for module, targets in GRAPH.items():
        if module == package or module.startswith(package + "."):
            outside = sorted(t for t in targets if not t.startswith(package))
            assert not outside, f"{module} imports {outside}"


def _third_party(path: Path) -> Iterator[str]:
    """The top-level names of every absolute import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("package", sorted(TORCH_FREE))
def test_torch_free_packages_import_neither_torch_nor_the_exporter(package: str) -> None:
    allowed = TORCH_FREE[package]
    modules = {m: p for m, p in MODULES.items() if m == package or m.startswith(package + ".")}
    assert modules, f"no modules found for {package}"
    for module, path in modules.items():
        exporter = sorted(t for t in GRAPH[module] if not t.startswith(allowed))
        assert not exporter, f"{module} imports {exporter}; {package} may import only {allowed}"
        libraries = sorted(set(_third_party(path)) & set(EXPORTER_LIBRARIES))
        assert not libraries, f"{module} imports {libraries}; {package} must stay torch-free"


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(GRAPH[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_no_two_files_import_each_other() -> None:
    assert _cycles() == [], (
        "files that import each other (directly or around a circle): "
        + "; ".join(" <-> ".join(c) for c in _cycles())
    )


def test_the_top_level_is_the_public_face_only() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, f"{len(top)} modules at onnx_export/'s top: {top}"


def test_the_stages_are_packages() -> None:
    for stage in ("capture", "translation", "optimization", "reporting", "program"):
        assert (PACKAGE / stage / "__init__.py").is_file(), stage


def test_the_check_sees_imports_and_would_catch_a_back_edge() -> None:
    assert "onnx_export.capture._strategies" in GRAPH["onnx_export.capture._call"]
    assert "onnx_export.translation._translate" in GRAPH["onnx_export.program._verify"]
    assert _rank("onnx_export.capture._call") < _rank("onnx_export.translation._translate")
    assert _rank("onnx_export.cli.export") == TOP
    assert len(_edges()) > 200
