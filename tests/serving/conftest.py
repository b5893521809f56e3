"""Exported models for the serving tests: each exported once per test session.

A real Triton server needs the ``nvidia-pytriton`` package (its bundled ``tritonserver``);
the server tests skip without it, unless ``ONNX_EXPORT_REQUIRE_TRITON=1`` (set by CI) makes
its absence a failure.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

import onnx_export
from onnx_export import hf


class Cached(torch.nn.Module):
    """Nested inputs and outputs, a keyword-only constant, an optional ``None``."""

    def forward(self, x, cache, *, scale: float = 1.0, mask=None):
        y = x * scale + cache[0]
        if mask is not None:
            y = y * mask
        return {"y": y, "past": (cache[1] - x, x.sum(-1))}


class TinyVision(torch.nn.Module):
    """A small convolutional classifier over ``[batch, 3, 16, 16]`` images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, pixel_values):
        features = torch.relu(self.conv(pixel_values)).mean(dim=(2, 3))
        return self.head(features)


@dataclasses.dataclass(frozen=True)
class Saved:
    """A saved model (or exported HF folder) and its eager twin."""

    name: str
    model: Any
    path: pathlib.Path


def _nested(folder: pathlib.Path) -> Saved:
    torch.manual_seed(0)
    model = Cached().eval()
    x = torch.randn(3, 4)
    cache = [torch.randn(3, 4), torch.randn(3, 4)]
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch"}, "cache": [{0: "batch"}, {0: "batch"}]}
    )
    program = onnx_export.dynamo_export(model, x, cache, scale=3.0, export_options=options)
    program.save(folder / "cached.onnx")
    return Saved("cached", model, folder / "cached.onnx")


def _static(folder: pathlib.Path) -> Saved:
    model = Cached().eval()
    x = torch.randn(2, 4)
    program = onnx_export.dynamo_export(model, x, [x, x], scale=2.0)
    program.save(folder / "static.onnx")
    return Saved("static", model, folder / "static.onnx")


def _vision(folder: pathlib.Path) -> Saved:
    torch.manual_seed(0)
    model = TinyVision().eval()
    options = onnx_export.ExportOptions(dynamic_shapes={"pixel_values": {0: "batch"}})
    program = onnx_export.dynamo_export(model, torch.randn(2, 3, 16, 16), export_options=options)
    program.save(folder / "vision.onnx")
    return Saved("vision", model, folder / "vision.onnx")


def _bert(folder: pathlib.Path) -> Saved:
    from tests.hf.checkpoints import CASES

    model = CASES["bert"].save(folder / "checkpoint")
    hf.export_pretrained(folder / "checkpoint", folder / "bert")
    return Saved("bert", model, folder / "bert")


_MAKERS: dict[str, Callable[[pathlib.Path], Saved]] = {
    "cached": _nested,
    "static": _static,
    "vision": _vision,
    "bert": _bert,
}


@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Saved]:
    """``saved(name)``: one of ``cached``, ``static``, ``vision``, ``bert``, exported once."""
    cache: dict[str, Saved] = {}

    def get(name: str) -> Saved:
        if name not in cache:
            cache[name] = _MAKERS[name](tmp_path_factory.mktemp(name))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def tritonserver_home() -> pathlib.Path:
    """The bundled ``tritonserver`` folder; skips (or fails, in CI) without nvidia-pytriton."""
    from onnx_export.serving import ServerError, find_tritonserver

    try:
        return find_tritonserver()
    except ServerError as e:
        if os.environ.get("ONNX_EXPORT_REQUIRE_TRITON") == "1":
            pytest.fail(f"ONNX_EXPORT_REQUIRE_TRITON=1 but {e}")
        pytest.skip(str(e))
