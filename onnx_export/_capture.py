"""Capture: turn an ``nn.Module`` into an ``ExportedProgram`` with torch.export.

Strategies are tried in the configured order; every attempt is recorded, whether it
worked or not, so that a failure can be explained strategy by strategy.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

__all__ = ["CaptureAttempt", "capture", "EXPORT_LOCK"]

#: torch.export keeps its dispatch-mode stack in process-global state: parallel calls
#: corrupt each other. Every capture and decomposition runs under this lock.
EXPORT_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class CaptureAttempt:
    """One try of one capture strategy.

    Attributes:
        strategy: ``"non_strict"`` or ``"strict"``.
        succeeded: Whether it produced an ``ExportedProgram``.
        seconds: How long it took.
        exception: What it raised, when it failed.

    Example:
        >>> import onnx_export
        >>> a = onnx_export.CaptureAttempt("strict", False, 0.5, ValueError("no"))
        >>> a.summary()
        'strict: failed after 0.50 s: ValueError: no'
    """

    strategy: str
    succeeded: bool
    seconds: float
    exception: BaseException | None = None

    def summary(self) -> str:
        """One line: the strategy, the outcome and the exception."""
        if self.succeeded:
            return f"{self.strategy}: succeeded in {self.seconds:.2f} s"
        first = str(self.exception).strip().splitlines()[0] if str(self.exception).strip() else ""
        return (
            f"{self.strategy}: failed after {self.seconds:.2f} s: "
            f"{type(self.exception).__name__}: {first}"
        )


def _export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    strict: bool,
) -> ExportedProgram:
    return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)


def capture(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    dynamic_shapes: Any,
    strategies: Sequence[str],
) -> tuple[ExportedProgram | None, list[CaptureAttempt]]:
    """Try each strategy in order; return the first program and every attempt."""
    attempts: list[CaptureAttempt] = []
    for strategy in strategies:
        start = time.perf_counter()
        try:
            with EXPORT_LOCK:
                program = _export(model, args, kwargs, dynamic_shapes, strategy == "strict")
        except Exception as e:
            attempts.append(CaptureAttempt(strategy, False, time.perf_counter() - start, e))
            continue
        attempts.append(CaptureAttempt(strategy, True, time.perf_counter() - start))
        return program, attempts
    return None, attempts
