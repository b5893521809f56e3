"""Per-stage wall time of one export: where the seconds go.

``dynamo_export`` times each stage (capture, decomposition, translation, the optimizer, the
weight folds, ONNX Runtime's fusions, the adapter, ...) with one :class:`StageTimer`; the
times end up on the program (``ONNXProgram.stage_times``). A stage entered twice adds
up. Timing costs two ``perf_counter`` calls a stage, nothing per node. The report gets the
same numbers as one note (OXE0021, :func:`record_stage_times`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

from onnx_export.diagnostics import DiagnosticContext, rules

__all__ = ["StageTimer", "record_stage_times"]


class StageTimer:
    """Adds up the wall time spent in named stages, in the order they first ran."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as (part of) stage ``name``; a failing block is timed too."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - start

    def total(self) -> float:
        """Seconds since the timer was made."""
        return time.perf_counter() - self._start


def record_stage_times(
    context: DiagnosticContext, times: Mapping[str, float], total: float
) -> None:
    """The stage times of an export as one note (OXE0021) in its report."""
    stages = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in times.items()) or "none"
    context.emit(
        rules.STAGE_TIMES,
        message_args={"total": f"{total:.3f}", "stages": stages},
        properties={
            "stage_seconds": {name: round(seconds, 6) for name, seconds in times.items()},
            "total_seconds": round(total, 6),
        },
    )
