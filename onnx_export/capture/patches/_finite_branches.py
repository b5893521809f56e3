"""float16 overflow guards, ``if not torch.isfinite(x).all(): x = torch.clamp(x, ...)``, traced.

BART's encoder layer (and Marian's, mBART's, LED's, PLBart's... in transformers) ends with

    if hidden_states.dtype == torch.float16 and not torch.isfinite(hidden_states).all():
        clamp_value = torch.finfo(hidden_states.dtype).max - 1000
        hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)

In float16 the ``if`` asks for a tensor's value, and torch.export stops there. The branch
is a select: ``torch.where(torch.isfinite(x).all(), x, torch.clamp(x, ...))`` computes
what the model computes, for finite and infinite values alike (always clamping would not:
finite values above ``max - 1000`` would be clamped too). :func:`finite_branches`
traces it that way during non-strict capture: a torch function mode that sees
``isfinite(x).all()`` asked for its truth on a line whose next lines clamp, answers
"not all finite" (so the clamp is traced), and turns the clamp of ``x`` that follows into
the select. Any other use of the value (an ``if`` that raises, a clamp of something else)
is left alone and fails as before.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from onnx_export.capture._user_code import innermost_user_frame
from onnx_export.capture.patches._registry import Patch, Target

__all__ = ["PATCH", "finite_branches", "has_float16_tensors"]

_CLAMPS = frozenset({torch.clamp, torch.Tensor.clamp, torch.clip, torch.Tensor.clip})
#: How many lines after the ``if`` may hold the clamp.
_LOOKAHEAD = 3


def has_float16_tensors(model: torch.nn.Module, inputs: Any = ()) -> bool:
    """Whether a parameter, buffer or input tensor is float16 (where the guards are reached)."""
    tensors = [*model.parameters(), *model.buffers(), *pytree.tree_leaves(inputs)]
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.float16 for t in tensors)


def _caller_clamps_next() -> bool:
    """Whether the model's line asking for the truth is an ``isfinite`` test whose body clamps."""
    frame = innermost_user_frame(sys._getframe(2))
    if frame is None:
        return False
    path, line = frame.f_code.co_filename, frame.f_lineno
    if "isfinite" not in linecache.getline(path, line):
        return False
    following = (linecache.getline(path, line + i) for i in range(1, _LOOKAHEAD + 1))
    return any("clamp(" in text or "clip(" in text for text in following)


class _FiniteBranches(TorchFunctionMode):
    """``if not isfinite(x).all(): x = clamp(x)`` as ``where(isfinite(x).all(), x, clamp(x))``."""

    def __init__(self) -> None:
        super().__init__()
        # id -> (the value, the tensor tested): the values are kept, so ids stay unique
        self._finite: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._all: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.isfinite and args and isinstance(args[0], torch.Tensor):
            out = func(*args, **kwargs)
            self._finite[id(out)] = (out, args[0])
            return out
        if (
            func is torch.Tensor.all
            and len(args) == 1
            and not kwargs
            and id(args[0]) in self._finite
        ):
            out = func(*args)
            self._all[id(out)] = (out, self._finite[id(args[0])][1])
            return out
        if func is torch.Tensor.__bool__ and args and id(args[0]) in self._all:
            tested_all, tested = self._all[id(args[0])]
            if _caller_clamps_next():
                self._pending = (tested, tested_all)
                return False  # "not all finite": the clamp is traced, and selected below
        if func in _CLAMPS and self._pending is not None and args and args[0] is self._pending[0]:
            tested, all_finite = self._pending
            self._pending = None
            return torch.where(all_finite, tested, func(*args, **kwargs))
        return func(*args, **kwargs)


@contextlib.contextmanager
def finite_branches(enabled: bool) -> Iterator[None]:
    """Trace float16 overflow guards as selects for the block (non-strict capture)."""
    if not enabled:
        yield
        return
    with _FiniteBranches():
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="finite_branches",
    targets=(
        Target("torch", "isfinite"),
        Target("torch", "Tensor.all"),
        Target("torch", "Tensor.__bool__"),
        Target("transformers.models.bart.modeling_bart", "BartEncoderLayer.forward", example=True),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="float16 overflow guards (if not isfinite(x).all(): clamp) ask for a tensor's value",
    apply=lambda call: finite_branches(
        not call.strict and has_float16_tensors(call.model, (call.args, call.kwargs))
    ),
)
