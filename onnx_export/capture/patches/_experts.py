"""Mixtures of experts that loop over the experts that got tokens, captured over every expert.

transformers' mixtures of experts route each token to a few experts, then loop in Python
over the experts that got at least one token::

    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx[0]])
        ...
        final_hidden_states.index_add_(0, token_idx, expert_output)

How many times the loop runs depends on the routing (data), which torch.export cannot
trace ("Could not guard on data-dependent expression"). Classes decorated with
``@use_experts_implementation`` avoid the loop through transformers' own switch; the
others (DBRX, and any model written the same way) do not.

While :func:`every_expert` is active, iterating over the ``nonzero()`` of a 1-D mask
computed in the ``forward`` of a module with an integer ``num_experts`` yields every
expert index ``0 .. min(len(mask), num_experts) - 1`` instead of the hit ones. The loop
is then unrolled once per expert. It is exact for this class: an expert that got no
token selects no token (``torch.where`` of its empty mask row, sizes that torch.export
keeps symbolic), and adds nothing. Indices from ``num_experts`` on (the extra one-hot
class some models add and skip) are not visited. The export's default parity check runs
the program against eager, so a module of another kind would show as a mismatch.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "every_expert"]


def _experts_of_caller(depth: int) -> int | None:
    """``num_experts`` of the module whose method is ``depth`` frames up, or ``None``."""
    owner = sys._getframe(depth + 1).f_locals.get("self")
    count = getattr(owner, "num_experts", None) if isinstance(owner, torch.nn.Module) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _is_traced(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` has no values here (torch.export's fake tensors)."""
    return isinstance(tensor, torch._subclasses.fake_tensor.FakeTensor)


class _ExpertIndex(list[int]):
    """``[index]``, with the tensor methods a loop body calls on ``nonzero()``'s rows."""

    def item(self) -> int:
        return self[0]

    def __index__(self) -> int:  # ``self.experts[expert_idx]`` (transformers 4.57's loops)
        return self[0]

    def tolist(self) -> list[int]:
        return list(self)


@contextlib.contextmanager
def every_expert() -> Iterator[None]:
    """Loops over the experts a mixture of experts' router hit go over every expert.

    Example:
        >>> with every_expert():
        ...     pass
    """
    hits: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
    method: Any = torch.Tensor.nonzero
    function: Any = torch.nonzero
    iterate: Any = torch.Tensor.__iter__

    def record(mask: Any, result: Any, extra: tuple[Any, ...], options: dict[str, Any]) -> Any:
        if extra or options or not isinstance(mask, torch.Tensor) or mask.dim() != 1:
            return result
        experts = _experts_of_caller(2)
        if experts is not None and _is_traced(mask) and isinstance(mask.shape[0], int):
            hits[id(result)] = (weakref.ref(result), min(experts, mask.shape[0]))
        return result

    def nonzero_method(self: torch.Tensor, *extra: Any, **options: Any) -> Any:
        return record(self, method(self, *extra, **options), extra, options)

    def nonzero_function(input: torch.Tensor, *extra: Any, **options: Any) -> Any:
        return record(input, function(input, *extra, **options), extra, options)

    def iterate_experts(self: torch.Tensor) -> Iterator[Any]:
        hit = hits.get(id(self))
        if hit is None or hit[0]() is not self:
            return iter(iterate(self))
        # One-element lists of Python ints: they index as ``tensor([index])`` does, their
        # ``[0]`` is a plain int (a static select; NLLB-MoE's ``f"expert_{expert_idx[0]}"``
        # names the module as eager's 0-d tensor does, a fake one would not).
        return iter([_ExpertIndex([index]) for index in range(hit[1])])

    patches: list[tuple[Any, str, Any]] = [
        (torch.Tensor, "nonzero", nonzero_method),
        (torch, "nonzero", nonzero_function),
        (torch.Tensor, "__iter__", iterate_experts),
    ]
    with swapped(*patches):  # patched while capturing (under EXPORT_LOCK)
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="experts",
    targets=(
        Target("torch", "nonzero"),
        Target("torch", "Tensor.nonzero"),
        Target("torch", "Tensor.__iter__"),
        Target("transformers.models.dbrx.modeling_dbrx", "DbrxExperts.forward", example=True),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 4.57.6", "transformers 5.25"),
    why="a mixture of experts loops over the experts its router hit, a number read from data",
    apply=lambda call: every_expert(),
)
