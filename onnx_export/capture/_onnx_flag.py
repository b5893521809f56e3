"""``torch.onnx.is_in_onnx_export()`` is True while this exporter captures a model.

Models branch on it to take an export-friendly path (``x.sin() if
torch.onnx.is_in_onnx_export() else x.cos()``). Its flag lives in ``torch.onnx``'s
private modules, which this exporter does not touch, so the public function itself is
replaced for the duration of the capture and put back afterwards. The replacement answers
True only in the thread that captures (another thread running the model eagerly meanwhile
still gets torch's own answer); captures hold ``EXPORT_LOCK``, so one runs at a time.
``torch._dynamo.assume_constant_result`` makes strict capture (dynamo) read it as the
constant it is during the capture, as non-strict capture (plain Python) does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import torch
import torch.onnx

__all__ = ["onnx_export_flag"]

_state = threading.local()  # depth: captures of this thread in progress (nested exports)


def _in_our_capture() -> bool:
    return int(getattr(_state, "depth", 0)) > 0


def _answer(original: Callable[[], bool]) -> Callable[[], bool]:
    def is_in_onnx_export() -> bool:
        """Returns whether it is in the middle of ONNX export (onnx_export's or torch's)."""
        return _in_our_capture() or original()

    is_in_onnx_export.__wrapped_original__ = original  # type: ignore[attr-defined]  # a marker
    constant: Callable[[], bool] = torch._dynamo.assume_constant_result(  # type: ignore[no-untyped-call]  # torch leaves it untyped
        is_in_onnx_export
    )
    return constant


@contextlib.contextmanager
def onnx_export_flag() -> Iterator[None]:
    """Within the block, ``torch.onnx.is_in_onnx_export()`` is True in this thread."""
    current = torch.onnx.is_in_onnx_export
    original = getattr(current, "__wrapped_original__", current)
    _state.depth = int(getattr(_state, "depth", 0)) + 1
    torch.onnx.is_in_onnx_export = _answer(original)
    try:
        yield
    finally:
        _state.depth -= 1
        if _state.depth == 0:
            torch.onnx.is_in_onnx_export = original
