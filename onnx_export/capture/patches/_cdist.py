"""``torch.cdist`` on rows counted by an unbacked size, captured with eager's own choice.

``torch.cdist(x1, x2)`` (p=2, the default compute mode) computes the distances by matrix
products when either side has more than 25 rows, and directly otherwise. The C++ op
asks ``r1 > 25`` first; when ``x1``'s row count is an unbacked size (Mimi's audio frames
against its codebook), torch.export cannot answer ("Could not guard on data-dependent
expression"), though ``x2``'s 64 codebook rows already decide it.

While :func:`cdist_decided` is active, a default-mode Euclidean ``torch.cdist`` whose
one side has more than 25 rows for certain (as torch.export knows them) and whose other
side's count is undecided asks for the matrix-product mode explicitly: the mode eager
takes for every such input. Every other call is unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "cdist_decided"]

#: Rows above which eager's default mode uses matrix products (aten's cdist).
_MM_ROWS = 25


def _more_rows_for_certain(tensor: torch.Tensor) -> bool:
    return bool(statically_known_true(tensor.shape[-2] > _MM_ROWS))


def _undecided(tensor: torch.Tensor) -> bool:
    rows = tensor.shape[-2]
    return not (statically_known_true(rows > _MM_ROWS) or statically_known_true(rows <= _MM_ROWS))


@contextlib.contextmanager
def cdist_decided() -> Iterator[None]:
    """``torch.cdist`` takes eager's mode where one side decides it, while active.

    Example:
        >>> with cdist_decided():
        ...     torch.cdist(torch.ones(1, 30, 2), torch.ones(1, 3, 2)).shape
        torch.Size([1, 30, 3])
    """
    original = torch.cdist

    def cdist(
        x1: torch.Tensor,
        x2: torch.Tensor,
        p: float = 2.0,
        compute_mode: str = "use_mm_for_euclid_dist_if_necessary",
    ) -> Any:
        decided = (_more_rows_for_certain(x1) and _undecided(x2)) or (
            _more_rows_for_certain(x2) and _undecided(x1)
        )
        if p == 2 and compute_mode == "use_mm_for_euclid_dist_if_necessary" and decided:
            compute_mode = "use_mm_for_euclid_dist"
        return original(x1, x2, p, compute_mode)

    with swapped((torch, "cdist", cdist)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="cdist",
    targets=(Target("torch", "cdist", ("x1", "x2", "p", "compute_mode")),),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="cdist's mode asks rows > 25 of an unbacked row count",
    apply=lambda call: cdist_decided(),
)
