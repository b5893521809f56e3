"""Stack traces that reach the line of each op, also in non-strict capture.

torch.export's non-strict tracer keeps only the frames of ``forward`` methods in a node's
``stack_trace`` (``_record_forward_stack_traces_only``), so an op called from a helper
function (``torch.linspace`` inside ``make_grid()``) is located at the line of
``forward`` that called the helper. While :func:`every_user_frame` is active, the tracer
keeps every frame from the first ``forward`` down, and ``node_origin`` then names the
innermost line outside torch: the op's own line, as strict capture does.

The traces are also recorded more cheaply than torch records them (#39): torch builds a
summary of every frame of the stack for each node (some 60 deep, export's own frames
included) and then drops most; here the interpreter's frames are walked, torch's
uninteresting files dropped before any line is read, and each frame formatted once per
capture. The text is torch's, down to the op's call into the tracer (torch's went on into
the tracer's own frames): 7% of UNet's capture time, 10% of a graph network's.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import traceback
import types
from collections.abc import Iterator
from typing import Any

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "every_user_frame", "user_stack_trace"]


@contextlib.contextmanager
def every_user_frame(enabled: bool = True) -> Iterator[None]:
    """Record every frame below ``forward`` in non-strict capture (within the block).

    Callers hold the export lock: the tracer class is patched for the process.
    """
    tracer = _module_stack_tracer() if enabled else None
    if tracer is None:
        yield
        return
    original, create_node = tracer.__init__, tracer.create_node
    texts: dict[tuple[str, int, str], str] = {}  # each frame's lines, for this capture

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._record_forward_stack_traces_only = False
        # Recorded below, from the interpreter's frames: torch's way builds a summary of
        # every frame of the whole stack (export's own, some 60 deep) for each node.
        # Export's own tracer only (a subclass may turn the traces off after this).
        if type(self) is tracer and self.record_stack_traces:
            self._onnx_export_stacks = True
            self.record_stack_traces = False

    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        node = create_node(self, *args, **kwargs)
        if getattr(self, "_onnx_export_stacks", False) and not node.stack_trace:
            text = user_stack_trace(sys._getframe(1), texts)
            if text:
                node.stack_trace = text
        return node

    with swapped((tracer, "__init__", init), (tracer, "create_node", create)):
        yield


def user_stack_trace(
    frame: types.FrameType | None, texts: dict[tuple[str, int, str], str] | None = None
) -> str:
    """``frame``'s stack from the outermost ``forward`` down, torch's own files left out.

    The text torch's tracer records (``traceback`` format, outermost first) down to the
    op's call into the tracer (torch's text went on into the tracer's own frames), built
    only for the frames it keeps: torch's uninteresting files are dropped by name before
    any line is read, and each frame's lines are formatted once (``texts`` keeps them:
    the nodes of one module share most of their frames).

    Example:
        >>> def forward():
        ...     return user_stack_trace(sys._getframe())
        >>> forward().splitlines()[0].endswith("in forward")
        True
    """
    frames: list[types.FrameType] = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    start = next((i for i, f in enumerate(frames) if f.f_code.co_name == "forward"), None)
    if start is None:
        return ""
    skipped = _uninteresting_files()
    keys = [
        (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        for f in frames[start:]
        if f.f_code.co_filename not in skipped
    ]
    if _repeats(keys):  # traceback folds a frame repeated 4 times or more: its own text
        summary = traceback.StackSummary.from_list([traceback.FrameSummary(*k) for k in keys])
        return "".join(summary.format()).strip()
    cache = {} if texts is None else texts
    parts = []
    for key in keys:
        text = cache.get(key)
        if text is None:
            one = traceback.StackSummary.from_list([traceback.FrameSummary(*key)])
            text = cache[key] = "".join(one.format())
        parts.append(text)
    return "".join(parts).strip()


def _repeats(keys: list[tuple[str, int, str]]) -> bool:
    run = 1
    for before, after in itertools.pairwise(keys):
        run = run + 1 if before == after else 1
        if run > 3:
            return True
    return False


def _uninteresting_files() -> set[str]:
    from torch.fx.experimental.symbolic_shapes import uninteresting_files

    return uninteresting_files()


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
        Target("torch.fx.experimental.proxy_tensor", "_ModuleStackTracer.create_node"),
        Target("torch.fx.experimental.symbolic_shapes", "uninteresting_files"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="non-strict capture keeps only forward methods' frames, and records them slowly",
    apply=lambda call: every_user_frame(not call.strict),
)
