"""Where the model's code compared a dynamic size with 1, a branch torch decided for it.

torch.export gives a dynamic size the range ``[2, inf)``, so a comparison of that size
with 1 (``if x.shape[0] == 1:``) is decided without a guard: the size-1 branch is never
traced, and the exported model differs from eager PyTorch at size 1 with nothing said.
While :func:`watching_size_one` is active, ``torch.SymInt``'s comparisons with 1 or 2
are watched: one that the model's own code made (not torch's meta functions or
decompositions), whose answer at 1 would differ from its answer at the example's size,
is handed to the caller with the model's line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import operator
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any

import torch

from onnx_export.capture._user_code import is_user_code, traced_stack

__all__ = ["SizeOneComparison", "watching_size_one"]


@dataclasses.dataclass(frozen=True)
class SizeOneComparison:
    """A comparison of the model's with 1 that torch decided from a size's range.

    Attributes:
        symbol: torch's symbol of the size (``"s77"``).
        location: ``"file.py:12"`` of the model's line that compared it.
        code: That line's text.
    """

    symbol: str
    location: str
    code: str


#: Comparisons of a size with an int; with 1 (or 2), torch decides them from the range
#: ``[2, inf)`` it gives dynamic sizes, so the size-1 branch is never traced.
_COMPARISONS = {
    "__eq__": operator.eq,
    "__ne__": operator.ne,
    "__lt__": operator.lt,
    "__le__": operator.le,
    "__gt__": operator.gt,
    "__ge__": operator.ge,
}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
#: Torch's code that compares sizes for its own reasons (meta functions, references,
#: decompositions, fake tensors, modules): a comparison under it is not the model's.
_LIBRARY = tuple(
    os.path.join(_TORCH_DIR, *part)
    for part in (
        ("_refs", ""),
        ("_prims", ""),
        ("_prims_common", ""),
        ("_meta_registrations.py",),
        ("_decomp", ""),
        ("_subclasses", ""),
        ("nn", ""),
        ("_higher_order_ops", ""),
    )
)
#: The symbolic machinery's dispatch: a comparison under it was made by torch's C++ code
#: (``contiguous()``'s stride checks) or is the inner call of the model's own comparison,
#: which was seen on the way in.
_DISPATCH = tuple(
    os.path.join(_TORCH_DIR, "fx", "experimental", name)
    for name in ("sym_node.py", "proxy_tensor.py")
)
#: Dynamo's bytecode interpreter: a comparison under it (and no library code) is the
#: model's own expression, evaluated while tracing it (strict capture).
_INTERPRETER = os.path.join(_TORCH_DIR, "_dynamo", "symbolic_convert.py")
#: How many frames out from the comparison the model's line is looked for.
_DEPTH = 64


def _size_one_line() -> tuple[str, str] | None:
    """The model's line that compared a size with 1 itself (not torch's code), or ``None``."""
    frame: FrameType | None = sys._getframe(3)  # the comparison's caller
    for _ in range(_DEPTH):
        if frame is None:
            return None
        path = frame.f_code.co_filename
        if path.startswith(_LIBRARY) or path in _DISPATCH:
            return None
        if path == _INTERPRETER:
            stack = traced_stack()
            last = stack[-1] if stack else None
            if last is None or not is_user_code(last.filename):
                return None
            return f"{last.filename}:{last.lineno}", (last.line or "").strip()
        if is_user_code(path):  # non-strict: the model's frame compared it
            line = frame.f_lineno
            return f"{path}:{line}", linecache.getline(path, line).strip()
        frame = frame.f_back
    return None


def _note(
    sources: Mapping[str, str],
    found: Callable[[SizeOneComparison], None],
    size: Any,
    name: str,
    other: int,
) -> None:
    """Hand on a comparison of an input's size with 1 that torch decided from its range."""
    node = size.node
    expr = node.expr
    # A plain symbol only: printing a compound expression (YOLO's stride arithmetic on
    # multiples of 32) cost sympy 13 s of a 40 s capture, for comparisons never recorded.
    if not getattr(expr, "is_Symbol", False):
        return
    hint, symbol = node.hint, str(expr)
    if symbol not in sources or not isinstance(hint, int) or hint < 2:
        return
    compare = _COMPARISONS[name]
    if bool(compare(hint, other)) == bool(compare(1, other)):
        return  # the same branch at 1: nothing assumed
    bounds = node.shape_env.var_to_range.get(expr)
    if bounds is None or int(bounds.lower) < 2:
        return  # 1 is in the range: torch traced a real guard, recorded as such
    line = _size_one_line()
    if line is not None:
        found(SizeOneComparison(symbol, *line))


@contextlib.contextmanager
def watching_size_one(
    sources: Mapping[str, str], found: Callable[[SizeOneComparison], None]
) -> Iterator[None]:
    """Patch ``torch.SymInt``'s comparisons to see the model compare a size with 1 or 2.

    Args:
        sources: torch's source names of the inputs' sizes by symbol, as they are made
            (a size without one is not an input's, and not watched).
        found: Called with each comparison of the model's that torch decided.

    Callers hold the export lock: ``torch.SymInt`` is patched for the process.
    """
    originals = {name: getattr(torch.SymInt, name) for name in _COMPARISONS}

    def wrap(name: str, original: Any) -> Any:
        def compare(self: Any, other: Any) -> Any:
            result = original(self, other)
            if type(other) is int and 0 < other < 3:
                with contextlib.suppress(Exception):  # a check never breaks a capture
                    _note(sources, found, self, name, other)
            return result

        return compare

    for name, original in originals.items():
        setattr(torch.SymInt, name, wrap(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.SymInt, name, original)
