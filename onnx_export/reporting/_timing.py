"""Per-stage wall time of one export: where the seconds go.

``dynamo_export`` times each stage (capture, decomposition, translation, the optimizer, the
weight folds, ONNX Runtime's fusions, the adapter, ...) with one :class:`StageTimer`; the
times end up on the program (``ONNXProgram.stage_times``). A stage entered twice adds
up. Timing costs two ``perf_counter`` calls a stage, nothing per node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

__all__ = ["StageTimer"]


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
