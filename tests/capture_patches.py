"""Capture without one of its patches: the proof that a patch is still needed.

A test that proves a capture patch necessary captures the model without it and expects
torch.export to refuse. A newer torch (or transformers) may capture the case by itself:
then the test is skipped, saying that the patch may be retired, instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import onnx_export
import onnx_export.capture._strategies as strategies
from onnx_export.capture.patches import library_version

__all__ = ["refused_without"]


def refused_without(
    monkeypatch: pytest.MonkeyPatch, patch: str, export: Callable[[], object]
) -> onnx_export.CaptureError:
    """The error of ``export()`` run without capture patch ``patch``; a skip when it captures.

    Example:
        >>> # error = refused_without(monkeypatch, "cdist", lambda: dynamo_export(m, x))
    """
    names = [p.name for p in strategies.PATCHES]
    assert patch in names, f"no capture patch {patch!r}; the registered ones: {names}"
    kept = tuple(p for p in strategies.PATCHES if p.name != patch)
    monkeypatch.setattr(strategies, "PATCHES", kept)
    try:
        export()
    except onnx_export.CaptureError as error:
        return error
    versions = f"torch {torch.__version__}, transformers {library_version('transformers')}"
    pytest.skip(
        f"{versions} capture this without the {patch!r} capture patch: torch.export no "
        "longer refuses it, and the patch may be retired (see capture/patches/)"
    )
