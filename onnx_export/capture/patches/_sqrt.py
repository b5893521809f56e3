"""``math.sqrt`` of a number computed from sizes read from data, with its known range.

``math.sqrt(x)`` converts ``x`` to a Python float first. When ``x`` is arithmetic on
unbacked sizes (sizes computed from tensor values), that conversion asks for a value the
trace does not have ("Could not guard on data-dependent expression"), though what follows
may not need it: LLaVA-OneVision computes ``ratio = math.sqrt(h * w / (9 * side**2))``
over its unpadded image grid and interpolates only ``if ratio > 1.1``, which the sizes'
bounds decide for small grids.

While :func:`bounded_sqrt` is active, ``math.sqrt`` of a symbolic number with unbacked
symbols is computed in the graph (``torch.sqrt`` of a float64 scalar, read back with
``.item()``), and the result's range is set from the range torch.export knows for the
argument (its bound analysis on the expression as written, widened by a relative 1e-9
against rounding), so that a comparison the bounds decide is decided. The range is a
fact about every input, not a guess: the argument's bounds come from the sizes' own
bounds. Other arguments go to ``math.sqrt`` unchanged; code that imported the function
itself (``from math import sqrt``) is not affected.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "bounded_sqrt"]

#: How much the root's range is widened, relatively, against rounding.
_SLACK = 1e-9


def _bounds(value: torch.SymInt | torch.SymFloat) -> tuple[float, float] | None:
    """The argument's range as torch.export knows it, or ``None`` when it is unbounded."""
    node = value.node
    found = bound_sympy(node.expr, node.shape_env.var_to_range)
    low, high = float(found.lower), float(found.upper)
    if not (math.isfinite(low) and math.isfinite(high)) or low < 0:
        return None
    return low, high


def _root(value: torch.SymInt | torch.SymFloat, low: float, high: float) -> Any:
    """``sqrt(value)`` computed in the graph, an unbacked float in ``[sqrt(low), sqrt(high)]``."""
    scalar = torch.full((), value, dtype=torch.float64)  # type: ignore[call-overload]  # SymFloat fill
    root = torch.sqrt(scalar).item()
    least = math.sqrt(low) * (1 - _SLACK)
    most = math.sqrt(high) * (1 + _SLACK) + _SLACK
    shape_env = root.node.shape_env  # type: ignore[union-attr]  # .item() of a traced scalar
    update = shape_env._update_var_to_range
    update(root.node.expr, ValueRanges(least, most))  # type: ignore[union-attr]
    return root


@contextlib.contextmanager
def bounded_sqrt() -> Iterator[None]:
    """``math.sqrt`` of a number of unbacked sizes keeps its range, while active.

    Example:
        >>> with bounded_sqrt():
        ...     math.sqrt(4)
        2.0
    """
    original = math.sqrt

    def sqrt(value: Any) -> Any:
        if isinstance(value, (torch.SymInt, torch.SymFloat)) and free_unbacked_symbols(value):
            bounds = _bounds(value)
            if bounds is not None:
                return _root(value, *bounds)
        return original(value)

    with swapped((math, "sqrt", sqrt)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="sqrt",
    targets=(
        Target("math", "sqrt"),
        Target("torch.utils._sympy.value_ranges", "bound_sympy"),
        Target("torch.fx.experimental.symbolic_shapes", "ShapeEnv._update_var_to_range"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="math.sqrt of unbacked sizes asks for their value",
    apply=lambda call: bounded_sqrt(),
)
