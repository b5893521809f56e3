"""Shared fixtures: each tiny checkpoint is saved and exported once per test session."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from onnx_export import hf
from tests.hf.checkpoints import CASES


@dataclasses.dataclass(frozen=True)
class Exported:
    """A tiny checkpoint, its eager model, and the folder export_pretrained wrote."""

    name: str
    model: Any
    checkpoint: pathlib.Path
    folder: pathlib.Path
    result: hf.ExportedCheckpoint


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Exported]:
    """``exported(name)``: the case saved with ``save_pretrained`` and exported (cached)."""
    cache: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in cache:
            root = tmp_path_factory.mktemp(name)
            model = CASES[name].save(root / "checkpoint")
            result = hf.export_pretrained(root / "checkpoint", root / "onnx")
            cache[name] = Exported(name, model, root / "checkpoint", root / "onnx", result)
        return cache[name]

    return get
