"""Capture without one of its patches: the proof that a patch is still needed.

A test that proves a capture patch necessary captures the model without it and expects
torch.export to refuse. A newer torch (or transformers) may capture the case by itself:
then the test is skipped, saying that the patch may be retired, instead of failing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import onnx_export
import onnx_export.capture._strategies as strategies
from onnx_export.capture.patches import _stack_traces, library_version
from onnx_export.capture.patches._registry import swapped

__all__ = ["patches_with_torchs_stack_traces", "refused_without", "torch_recorded_stack_traces"]


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


@contextlib.contextmanager
def torch_recorded_stack_traces(enabled: bool = True) -> Iterator[None]:
    """The ``stack_traces`` patch as it was before #39's seventh round: torch records them.

    Every frame below the outermost ``forward`` is kept, as the patch keeps them, but
    torch's tracer builds each trace (the reference the faster recorder is held to).
    """
    tracer = _stack_traces._module_stack_tracer() if enabled else None
    if tracer is None:
        yield
        return
    original = tracer.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._record_forward_stack_traces_only = False

    with swapped((tracer, "__init__", init)):
        yield


def patches_with_torchs_stack_traces() -> tuple[Any, ...]:
    """Capture's patches, with torch's stack-trace recorder in place of the ``stack_traces`` one.

    For ``swapped((strategies, "PATCHES", ...))``: the reference captures of the recorder's
    test and bench.
    """
    return tuple(
        dataclasses.replace(p, apply=lambda call: torch_recorded_stack_traces(not call.strict))
        if p.name == "stack_traces"
        else p
        for p in strategies.PATCHES
    )
