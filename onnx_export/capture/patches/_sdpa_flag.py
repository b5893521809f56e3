"""``scaled_dot_product_attention(..., is_causal=<a comparison of sizes>)``.

openai-whisper's attention (its default path since it uses PyTorch's SDPA) asks::

    scaled_dot_product_attention(q, k, v, is_causal=mask is not None and n_ctx > 1)

With a dynamic number of tokens, ``n_ctx > 1`` is a ``SymBool`` during capture, and the
fused op's argument parser, in C++, accepts only a Python ``bool``: the trace stops with
"argument 'is_causal' must be bool, not SymBool" (torch.onnx's export fails the same way).

While :func:`sdpa_size_flag` is active, the name ``scaled_dot_product_attention`` in every
loaded module that holds PyTorch's function (``torch.nn.functional`` and the modules that
imported it by name, as whisper does) is a function of ours that passes a symbolic
``is_causal`` on as what it is:

- decided by what torch.export knows of the sizes (``n_ctx > 1`` for a range that starts
  at 2): that ``bool``, with no guard added;
- undecided (a range that includes 1): the causal mask PyTorch's op would build (the lower
  triangle of ``(queries, keys)``, from the top left) where the comparison holds at run
  time, and no mask where it does not, so the file computes what eager computes at every
  size. With a mask of its own, the call is left to PyTorch (which refuses a mask together
  with ``is_causal``).

Every call with a plain ``bool`` goes to PyTorch's function unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from onnx_export.capture.patches._registry import Patch, Target, modules_holding, swapped

__all__ = ["PATCH", "sdpa_size_flag"]

_NAME = "scaled_dot_product_attention"
#: PyTorch's function's parameters, in their order.
_PARAMETERS = (
    "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa",
)  # fmt: skip


def _decided(flag: torch.SymBool) -> bool | None:
    """The flag's value where the sizes' ranges decide it (no guard added), else ``None``."""
    if statically_known_true(flag):
        return True
    if statically_known_true(torch.sym_not(flag)):  # type: ignore[no-untyped-call]  # no stubs
        return False
    return None


def _causal_where(flag: torch.SymBool, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """PyTorch's causal mask where ``flag`` holds at run time; every key allowed where not."""
    queries, keys = query.shape[-2], key.shape[-2]
    lower = torch.ones(queries, keys, dtype=torch.bool, device=query.device).tril()
    on = torch.sym_ite(flag, 1, 0)  # type: ignore[no-untyped-call]  # no stubs
    holds = torch.full((), on, device=query.device) > 0
    return lower | ~holds


def _passing(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (PyTorch's SDPA), taking a symbolic ``is_causal``."""

    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(_PARAMETERS, args, strict=False)) | kwargs
        flag = bound.get("is_causal", False)
        if not isinstance(flag, torch.SymBool) or len(args) > len(_PARAMETERS):
            return original(*args, **kwargs)
        decided = _decided(flag)
        if decided is None and bound.get("attn_mask") is None:
            bound["attn_mask"] = _causal_where(flag, bound["query"], bound["key"])
            decided = False
        elif decided is None:
            decided = bool(flag)  # PyTorch's own verdict (a guard, reported as a range)
        bound["is_causal"] = decided
        return original(**bound)

    return scaled_dot_product_attention


@contextlib.contextmanager
def sdpa_size_flag() -> Iterator[None]:
    """PyTorch's SDPA takes an ``is_causal`` computed from sizes, while active.

    Example:
        >>> import torch.nn.functional as F
        >>> with sdpa_size_flag():
        ...     F.scaled_dot_product_attention.__name__
        'scaled_dot_product_attention'
    """
    original = torch.nn.functional.scaled_dot_product_attention
    replacement = _passing(original)
    holders = modules_holding(_NAME, original, library=None)  # whisper imports it by name
    with swapped(*((module, _NAME, replacement) for module in holders)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="sdpa_size_flag",
    targets=(
        Target(
            "torch.nn.functional",
            _NAME,
            _PARAMETERS[:6],
        ),
        Target("torch", "sym_ite"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="SDPA's is_causal parser takes a bool, not a comparison of dynamic sizes",
    # Strict capture (dynamo) reads the flag itself; the function is replaced for plain
    # Python tracing only.
    apply=lambda call: contextlib.nullcontext() if call.strict else sdpa_size_flag(),
)
