"""The transformers range is honest: the floor pyproject admits is the one checked (#41)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from onnx_export.hf import CheckpointError
from onnx_export.hf.export._versions import TRANSFORMERS_FLOOR, require_transformers

_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_hf_extra_admits_the_floor_the_export_checks() -> None:
    extras = tomllib.loads(_PYPROJECT.read_text())["project"]["optional-dependencies"]
    (pin,) = [r for r in extras["hf"] if re.match(r"transformers\b", r)]
    assert pin == f"transformers>={TRANSFORMERS_FLOOR}"


@pytest.mark.parametrize("version", ["4.56.2", "4.57.6", "3.5.0", "5.0.0", "5.23.0", "5.24.0"])
def test_an_older_transformers_is_refused_with_the_command_that_installs_one(
    version: str,
) -> None:
    with pytest.raises(CheckpointError) as caught:
        require_transformers(version)
    message = str(caught.value)
    assert f"transformers {version} is installed" in message
    assert f">= {TRANSFORMERS_FLOOR}" in message
    assert f"pip install -U 'transformers>={TRANSFORMERS_FLOOR}'" in message


@pytest.mark.parametrize("version", [TRANSFORMERS_FLOOR, "5.25.0", "5.25.1", "6.0.0.dev0"])
def test_the_floor_and_newer_releases_pass(version: str) -> None:
    require_transformers(version)


def test_ci_runs_the_floor_it_reads_from_the_same_place() -> None:
    """``.ci/run`` pins transformers to the floor parsed from ``_versions.py``, not a copy."""
    ci = (_PYPROJECT.parent / ".ci" / "run").read_text()
    source = (_PYPROJECT.parent / "onnx_export" / "hf" / "export" / "_versions.py").read_text()
    pattern = re.search(r"sed -nE 's/(\^TRANSFORMERS_FLOOR[^/]*)/", ci)
    assert pattern is not None, "CI no longer reads the floor from _versions.py"
    (found,) = re.findall(pattern.group(1), source, flags=re.MULTILINE)
    assert found == TRANSFORMERS_FLOOR
    assert '"transformers==$floor"' in ci
