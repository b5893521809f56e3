"""Longformer-style attention's "is any token global?" flag, captured as its general branch.

Longformer's encoder (and LED's, copied from it) asks once whether any token of the batch
has global attention, then passes the answer down as a Python flag::

    is_global_attn = is_index_global_attn.flatten().any().item()
    ...
    if is_global_attn:  # in each layer's self-attention, three times

The flag is the input's value (``global_attention_mask``, or ``attention_mask == 2``):
torch.export cannot branch on it ("Could not guard on data-dependent expression").

The ``if`` chooses between two computations of the same attention: the global branch
handles every batch, including one where no token is global (its global part then has
zero columns: nothing is concatenated to the scores, a product over zero global keys adds
exact zeros to the local output, and nothing is overwritten). The local branch is a
shortcut for that case. While :func:`global_attention_flag` is active, the flag an
attention module's ``forward`` receives is ``True`` when torch.export traces it as a
value it cannot decide (an unbacked ``SymBool``); the program then computes eager's
numbers for inputs with and without global tokens. A flag that is a plain ``bool``
(eager, or an example torch.export already decided) is unchanged.

Two lines of the global branch need sizes that torch.export can compare: the maximum
number of global tokens (a 0-d tensor that ``_get_global_attn_indices`` returns and an
``assert`` compares with a shape) is returned as the size it is, and ``len()`` in the
attention's module file returns a tensor's traced first size as itself
(``len(is_local_index_global_attn_nonzero[0])``; ``len`` must otherwise return an int).

Modules concerned: those whose ``forward`` takes both ``is_index_global_attn`` and
``is_global_attn`` (transformers' ``LongformerSelfAttention``, ``LEDEncoderSelfAttention``
and the layers that pass the flag on). An output whose structure depends on the flag
(``output_attentions=True`` adds the global attentions only when a token is global)
still fails capture at the encoder's own ``if``, with the data-dependent message.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "global_attention_flag"]

_PARAMETERS = ("is_index_global_attn", "is_global_attn")


def _takes_the_flag(module: torch.nn.Module) -> bool:
    forward = getattr(type(module), "forward", None)
    if forward is None:
        return False
    try:
        parameters = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False
    return all(name in parameters for name in _PARAMETERS)


def _general_branch(forward: Callable[..., Any], position: int) -> Callable[..., Any]:
    """``forward`` with an undecidable ``is_global_attn`` replaced by ``True``."""

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("is_global_attn"), torch.SymBool):
            kwargs["is_global_attn"] = True
        elif len(args) > position and isinstance(args[position], torch.SymBool):
            args = (*args[:position], True, *args[position + 1 :])
        return forward(*args, **kwargs)

    return wrapper


def _sized_indices(find: Callable[..., Any]) -> Callable[..., Any]:
    """``_get_global_attn_indices`` whose maximum count is a size, not a 0-d tensor.

    The global branch builds tensors of that many rows, then asserts their shape equals
    ``[..., max_num_global_attn_indices, ...]``: a list holding a tensor, compared by
    value, which torch.export cannot decide; the traced size compares as itself.
    """

    @functools.wraps(find)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        found = find(*args, **kwargs)
        if not isinstance(found, tuple) or not isinstance(found[0], torch.Tensor):
            return found
        count = found[0].item()
        torch._check(count >= 0)  # type: ignore[no-untyped-call]  # no stubs
        return (count, *found[1:])

    return wrapper


def _symbolic_len(value: Any) -> Any:
    """``len(value)``; a tensor's traced first size as itself (``len`` would need an int)."""
    if (
        isinstance(value, torch.Tensor)
        and value.dim() > 0
        and isinstance(value.shape[0], torch.SymInt)
    ):
        return value.shape[0]
    return builtins.len(value)


@contextlib.contextmanager
def global_attention_flag(model: torch.nn.Module) -> Iterator[None]:
    """Longformer-style attention takes its global branch when the flag is data, while active.

    Example:
        >>> with global_attention_flag(torch.nn.Linear(2, 2)):
        ...     pass
    """
    replaced: list[tuple[Any, str, Any]] = []
    sources: set[str] = set()
    for module in model.modules():
        if not _takes_the_flag(module):
            continue
        names = list(inspect.signature(type(module).forward).parameters)
        flag = names.index("is_global_attn") - 1
        replaced.append((module, "forward", _general_branch(module.forward, flag)))
        find = getattr(module, "_get_global_attn_indices", None)
        if callable(find):
            replaced.append((module, "_get_global_attn_indices", _sized_indices(find)))
        source = sys.modules.get(type(module).__module__)
        if source is not None and "len" not in vars(source) and source.__name__ not in sources:
            sources.add(source.__name__)
            replaced.append((source, "len", _symbolic_len))  # the module's own len, for a while
    with swapped(*replaced):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="global_attention",
    targets=(
        Target(
            "transformers.models.longformer.modeling_longformer",
            "LongformerSelfAttention._get_global_attn_indices",
            example=True,
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="Longformer branches on whether any token is global, a value read from data",
    apply=lambda call: global_attention_flag(call.model),
)
