"""What a new user hit on a fresh clone (install truth, the CLI's missing doors, locations,
messages), one behaviour per test; the docs' claims are checked against each other and the code.
"""

from __future__ import annotations

import pathlib
import re
import tomllib

import pytest

from onnx_export._environment import TESTED_TORCH, TORCH_INSTALL

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = PROJECT_ROOT / "docs"
INSTALL_PAGES = ("README.md", "docs/getting-started.md", "docs/cli.md")
CPU_LINE = re.compile(r"pip install torch==\S+ --index-url [^\s`]+")


def _text(relative: str) -> str:
    return (PROJECT_ROOT / relative).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", INSTALL_PAGES)
def test_the_cpu_torch_line_is_the_same_everywhere(page: str) -> None:
    """README, getting started, the CLI page and ``doctor`` give one CPU install line."""
    lines = set(CPU_LINE.findall(_text(page).replace("\n", " ")))
    assert lines == {TORCH_INSTALL}, (page, lines)


def test_the_readme_commands_pin_the_torch_that_the_cpu_line_installs() -> None:
    """``torch==X`` in the two commands is what the CPU line installed, so pip keeps it."""
    readme = _text("README.md")
    commands = [line for line in readme.splitlines() if re.match(r"python -m pip install .*&&", line)]
    assert len(commands) == 2
    assert all(f"torch=={TESTED_TORCH} -e '.[" in line for line in commands), commands


def test_no_page_installs_onnx_export_from_the_index() -> None:
    """onnx-export is not on PyPI: no page tells a newcomer to ``pip install onnx-export``."""
    pages = [PROJECT_ROOT / "README.md", *DOCS.rglob("*.md")]
    bare = re.compile(r"pip install\s+onnx-export(?![\w\[-])")
    offenders = [p.name for p in pages if bare.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
    assert "not on PyPI" in _text("README.md")
    assert "not on PyPI" in _text("docs/getting-started.md")
    assert "not on PyPI" in _text("docs/deployment.md")


def test_the_wheel_the_docs_name_is_the_one_pip_builds() -> None:
    """``dist/onnx_export-VERSION-py3-none-any.whl`` follows pyproject's name and version."""
    project = tomllib.loads(_text("pyproject.toml"))["project"]
    wheel = f"dist/{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"
    for page in ("README.md", "docs/getting-started.md", "docs/deployment.md"):
        names = set(re.findall(r"dist/\S+?\.whl", _text(page)))
        assert names == {wheel}, (page, names)


def test_the_readme_says_how_long_the_tests_take_and_how_to_run_the_slow_ones() -> None:
    readme = " ".join(_text("README.md").split())
    assert "about 20 minutes on a 2-core machine" in readme
    assert "python -m pytest tests/ops --runslow" in readme
    conftest = _text("tests/ops/conftest.py")
    assert '"--runslow"' in conftest and "ONNX_EXPORT_RUNSLOW" in conftest
