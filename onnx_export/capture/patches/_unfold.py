"""``unfold`` of an image whose height or width is an unbacked size, with its own precondition.

``torch.nn.functional.unfold`` (im2col) requires a non-zero channel count, height and
width, and at least one block along each axis: eager raises otherwise. Its
decomposition asks those questions; when a size is
unbacked (Mistral3's patch merger reshapes each image's patches to the grid
``image_sizes // patch_size``, values), torch.export cannot answer ("Could not guard on
data-dependent expression").

While :func:`unfold_preconditions` is active, ``unfold`` first states that precondition
with ``torch._check`` for each of those sizes it does not know to be non-zero: a runtime
assert in the program, true for every input eager accepts (eager refuses the others).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "unfold_preconditions"]


def _unbacked(size: Any) -> bool:
    return isinstance(size, torch.SymInt) and bool(free_unbacked_symbols(size))


def _check(condition: Any, message: str) -> None:
    """``torch._check``: a runtime assert in the program where ``condition`` is symbolic."""
    torch._check(condition, lambda: message)  # type: ignore[no-untyped-call]  # no stubs


def _pair(value: Any) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


@contextlib.contextmanager
def unfold_preconditions() -> Iterator[None]:
    """``unfold`` states its non-zero sizes for torch.export, while active.

    Example:
        >>> with unfold_preconditions():
        ...     torch.nn.functional.unfold(torch.ones(1, 2, 4, 4), 2, stride=2).shape
        torch.Size([1, 8, 4])
    """
    original = torch.nn.functional.unfold

    def unfold(
        input: torch.Tensor,  # torch's name
        kernel_size: Any,
        dilation: Any = 1,
        padding: Any = 0,
        stride: Any = 1,
    ) -> torch.Tensor:
        for size in input.shape[-3:]:
            if _unbacked(size):
                _check(size != 0, "unfold needs non-zero channels, height, width")
        parts = (_pair(a) for a in (kernel_size, dilation, padding, stride))
        pairs = zip(input.shape[-2:], *parts, strict=True)
        for size, kernel, dil, pad, step in pairs:
            if _unbacked(size):
                blocks = 1 + (size + 2 * pad - dil * (kernel - 1) - 1) // step
                _check(blocks > 0, "unfold needs at least one block per axis")
        return original(input, kernel_size, dilation, padding, stride)

    with swapped((torch.nn.functional, "unfold", unfold)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="unfold",
    targets=(
        Target(
            "torch.nn.functional",
            "unfold",
            ("input", "kernel_size", "dilation", "padding", "stride"),
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="unfold's decomposition asks whether unbacked sizes are non-zero",
    apply=lambda call: unfold_preconditions(),
)
