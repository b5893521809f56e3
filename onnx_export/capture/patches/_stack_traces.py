"""Stack traces that reach the line of each op, also in non-strict capture.

torch.export's non-strict tracer keeps only the frames of ``forward`` methods in a node's
``stack_trace`` (``_record_forward_stack_traces_only``), so an op called from a helper
function (``torch.linspace`` inside ``make_grid()``) is located at the line of
``forward`` that called the helper. While :func:`every_user_frame` is active, the tracer
keeps every frame from the first ``forward`` down, and ``node_origin`` then names the
innermost line outside torch: the op's own line, as strict capture does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "every_user_frame"]


@contextlib.contextmanager
def every_user_frame(enabled: bool = True) -> Iterator[None]:
    """Record every frame below ``forward`` in non-strict capture (within the block).

    Callers hold the export lock: the tracer class is patched for the process.
    """
    tracer = _module_stack_tracer() if enabled else None
    if tracer is None:
        yield
        return
    original = tracer.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._record_forward_stack_traces_only = False

    with swapped((tracer, "__init__", init)):
        yield


def _module_stack_tracer() -> Any:
    """Torch's non-strict tracer class, or None where this torch has another design."""
    from torch.fx.experimental import proxy_tensor

    tracer = getattr(proxy_tensor, "_ModuleStackTracer", None)
    if tracer is None or not hasattr(tracer, "_filter_traceback_frames"):
        return None
    return tracer


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="stack_traces",
    targets=(
        Target("torch.fx.experimental.proxy_tensor", "_ModuleStackTracer.__init__"),
        Target("torch.fx.experimental.proxy_tensor", "_ModuleStackTracer._filter_traceback_frames"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="non-strict capture keeps only the frames of forward methods in a node's stack trace",
    apply=lambda call: every_user_frame(not call.strict),
)
