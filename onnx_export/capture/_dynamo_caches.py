"""Forget what torch.compile cached while capturing a model, so the next capture starts clean.

Non-strict capture runs the bodies of ``map``/``while_loop``/``scan``/``cond`` through
``torch.compile`` (``_hop_compile_and_call``), which caches the compiled body per code
object with guards on the example shapes. A later capture of the same model with dynamic
shapes and the same example sizes passes those guards and reuses the static body: the
dimension comes out static (the export of ``map`` with a dynamic length, right after a
static export of it, is fixed to the first length). :func:`forget_compiled_code` drops,
after the block, the cache entries of the code objects first compiled inside it; code
the user compiled before the export keeps its entries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import CodeType
from typing import Any

__all__ = ["forget_compiled_code"]


def _trackers() -> tuple[Any, ...]:
    from torch._dynamo import convert_frame

    found = (
        getattr(convert_frame, "input_codes", None),
        getattr(convert_frame, "output_codes", None),
    )
    return tuple(t for t in found if t is not None and hasattr(t, "seen"))


def _codes(trackers: tuple[Any, ...]) -> dict[int, CodeType]:
    codes: dict[int, CodeType] = {}
    for tracker in trackers:
        for weak in list(tracker.seen):
            code = weak()
            if code is not None:
                codes[id(code)] = code
    return codes


@contextlib.contextmanager
def forget_compiled_code() -> Iterator[None]:
    """Within the block, compile as usual; after it, drop the code compiled for it."""
    trackers = _trackers()
    before = set(_codes(trackers))
    try:
        yield
    finally:
        if trackers:
            from torch._C._dynamo.eval_frame import reset_code

            for key, code in _codes(trackers).items():
                if key not in before:
                    reset_code(code)
