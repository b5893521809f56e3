"""``take_along_dim``, ``kron`` and ``multi_dot`` on dynamic sizes, with ops that follow them.

torch computes these in C++ from the inputs' sizes as plain integers, so torch.export
fixes every dynamic axis they see to the example's size ("You marked L['x'].size()[0]
as dynamic but your code specialized it"): a model that gathers its top-k rows with
``torch.take_along_dim``, builds a block matrix with ``torch.kron`` or chains products
with ``torch.linalg.multi_dot`` (which picks its order from the sizes) could not be
exported with a dynamic batch at all.

While :func:`composites_that_follow_sizes` is active, a call whose inputs have a
dynamic size is computed as torch defines it, from ops whose shapes follow the sizes:

- ``take_along_dim(x, indices, dim)``: both broadcast against each other except along
  ``dim``, then ``gather`` (``dim=None``: along the flattened inputs);
- ``kron(a, b)``: ``a``'s axes interleaved with ``b``'s by a broadcast product, then each
  pair merged;
- ``multi_dot(tensors)``: the products from left to right (a 1-D first or last tensor
  as a row or column), the same result up to rounding.

Calls on static sizes go to torch's own op, unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "composites_that_follow_sizes", "kron", "multi_dot", "take_along_dim"]


#: ``torch.broadcast_shapes`` (untyped in torch): the shape two shapes broadcast to.
_broadcast = cast(Callable[..., torch.Size], torch.broadcast_shapes)


def _dynamic(*tensors: Any) -> bool:
    """Whether any tensor has a size torch.export traces symbolically."""
    return any(
        isinstance(t, torch.Tensor) and any(not isinstance(s, int) for s in t.shape)
        for t in tensors
    )


def take_along_dim(x: torch.Tensor, indices: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``torch.take_along_dim``, from ``expand`` and ``gather``.

    Example:
        >>> x = torch.tensor([[10.0, 30.0, 20.0], [60.0, 40.0, 50.0]])
        >>> take_along_dim(x, x.argsort(dim=1), dim=1)
        tensor([[10., 20., 30.],
                [40., 50., 60.]])
        >>> take_along_dim(x, torch.tensor([5, 0]))
        tensor([50., 10.])
    """
    if dim is None:
        return x.reshape(-1).gather(0, indices.reshape(-1))
    if x.dim() != indices.dim():
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of "
            f"dimensions, but input has {x.dim()} dimensions and indices has "
            f"{indices.dim()} dimensions"
        )
    dim = dim % x.dim() if x.dim() else 0
    x_shape, i_shape = list(x.shape), list(indices.shape)
    x_shape[dim] = indices.shape[dim]
    i_target = _broadcast(tuple(x_shape), tuple(i_shape))
    i_shape[dim] = x.shape[dim]
    x_target = _broadcast(tuple(i_shape), tuple(x.shape))
    return x.expand(x_target).gather(dim, indices.expand(i_target))


def kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.kron``, from a broadcast product of interleaved axes and a ``reshape``.

    Example:
        >>> kron(torch.eye(2), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        tensor([[1., 2., 0., 0.],
                [3., 4., 0., 0.],
                [0., 0., 1., 2.],
                [0., 0., 3., 4.]])
    """
    rank = max(a.dim(), b.dim())
    a_sizes = [1] * (rank - a.dim()) + list(a.shape)
    b_sizes = [1] * (rank - b.dim()) + list(b.shape)
    a_spread = a.reshape([s for size in a_sizes for s in (size, 1)])
    b_spread = b.reshape([s for size in b_sizes for s in (1, size)])
    merged = [x * y for x, y in zip(a_sizes, b_sizes, strict=True)]
    return (a_spread * b_spread).reshape(merged)


def multi_dot(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.linalg.multi_dot``, multiplied from left to right.

    Example:
        >>> a, b, c = torch.ones(2, 3), torch.ones(3, 4), torch.ones(4)
        >>> multi_dot([a, b, c])
        tensor([12., 12.])
    """
    if len(tensors) < 2:
        raise RuntimeError("multi_dot(): expected at least 2 tensors but got " + str(len(tensors)))
    first, last = tensors[0], tensors[-1]
    result = first.unsqueeze(0) if first.dim() == 1 else first
    for matrix in tensors[1:-1]:
        result = result @ matrix
    result = result @ (last.unsqueeze(-1) if last.dim() == 1 else last)
    if last.dim() == 1:
        result = result.squeeze(-1)
    return result.squeeze(0) if first.dim() == 1 else result


@contextlib.contextmanager
def composites_that_follow_sizes() -> Iterator[None]:
    """``take_along_dim``, ``kron`` and ``multi_dot`` keep dynamic sizes dynamic, while active.

    Callers hold the export lock: ``torch``, ``torch.linalg`` and ``torch.Tensor`` are
    patched for the process.

    Example:
        >>> with composites_that_follow_sizes():
        ...     torch.kron(torch.ones(2, 1), torch.ones(1, 3)).shape
        torch.Size([2, 3])
    """
    original_take, original_kron = torch.take_along_dim, torch.kron
    original_multi_dot = torch.linalg.multi_dot

    def take(x: Any, indices: Any, dim: int | None = None, *, out: Any = None) -> Any:
        if out is not None or not _dynamic(x, indices):
            return original_take(x, indices, dim, out=out)
        return take_along_dim(x, indices, dim)

    def kron_(a: Any, b: Any, *, out: Any = None) -> Any:
        if out is not None or not _dynamic(a, b):
            return original_kron(a, b, out=out)
        return kron(a, b)

    def multi_dot_(tensors: Any, *, out: Any = None) -> Any:
        if out is not None or len(tensors) < 2 or not _dynamic(*tensors):
            return original_multi_dot(tensors, out=out)
        return multi_dot(tensors)

    def take_method(self: Any, indices: Any, dim: int | None = None) -> Any:
        return take(self, indices, dim)

    def kron_method(self: Any, other: Any) -> Any:
        return kron_(self, other)

    with swapped(
        (torch, "take_along_dim", take),
        (torch, "kron", kron_),
        (torch.linalg, "multi_dot", multi_dot_),
        (torch.Tensor, "take_along_dim", take_method),
        (torch.Tensor, "kron", kron_method),
    ):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="fixed_size_composites",
    targets=(
        Target("torch", "take_along_dim"),
        Target("torch", "kron"),
        Target("torch.linalg", "multi_dot"),
        Target("torch", "Tensor.take_along_dim"),
        Target("torch", "Tensor.kron"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="take_along_dim, kron and multi_dot compute from plain-int sizes, fixing dynamic axes",
    apply=lambda call: composites_that_follow_sizes(),
)
