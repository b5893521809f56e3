"""``cov``, ``corrcoef`` and ``combinations``, written with ops torch.export can trace.

torch computes these in C++ with steps that read tensor values, which torch.export
cannot follow, so a model that calls one could not be captured at all, at any shape:

- ``torch.cov`` (and ``torch.corrcoef``, built on it) compares the degrees of freedom
  with 0 by value (``aten.equal``: "DataDependentOutputException");
- ``torch.combinations`` selects the index pairs with ``masked_select``, whose output
  length is read from data ("Pending unbacked symbols").

While :func:`traceable_value_checks` is active they are computed as torch defines them
with ops whose shapes follow from the inputs' shapes: ``cov`` as the (weighted)
centred product over the degrees of freedom (a degree of freedom at or below 0 divides
by 0, as torch does after its warning), ``corrcoef`` as ``cov`` scaled by the standard
deviations and clipped to ``[-1, 1]``, and ``combinations`` of an input of known length as
a gather of the index tuples, listed when the model is captured. Complex inputs, and
``combinations`` of a dynamic length or of ``r=0``, go to torch's own op.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "combinations", "corrcoef", "cov", "traceable_value_checks"]


#: ``torch.sym_max`` (untyped in torch): the larger of two sizes, symbolic or not.
_sym_max: Callable[[Any, Any], Any] = torch.sym_max


def cov(
    x: torch.Tensor,
    *,
    correction: int = 1,
    fweights: torch.Tensor | None = None,
    aweights: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch.cov``: rows are variables, columns observations (a 1-D input is one variable).

    Example:
        >>> x = torch.tensor([[0.0, 1.0, 3.0], [2.0, 2.0, 5.0]])
        >>> torch.allclose(cov(x), torch.cov(x))
        True
        >>> torch.allclose(cov(x, fweights=torch.tensor([1, 2, 1])),
        ...                torch.cov(x, fweights=torch.tensor([1, 2, 1])))
        True
    """
    if x.dim() > 2:
        raise RuntimeError(
            "cov(): expected input to have two or fewer dimensions but got an input with "
            f"{x.dim()} dimensions"
        )
    rows = x if x.dim() == 2 else x.reshape(1, -1)
    weights = fweights
    if aweights is not None:
        weights = aweights if weights is None else weights * aweights
    if weights is None:
        total: Any = rows.shape[1]
        mean = rows.sum(1, keepdim=True) / total
        dof: Any = _sym_max(total - correction, 0)
    else:
        total = weights.sum()
        mean = (rows * weights).sum(1, keepdim=True) / total
        if correction == 0:
            dof = total
        elif aweights is None:
            dof = total - correction
        else:
            dof = total - correction * (weights * aweights).sum() / total
        dof = dof.clamp(min=0)
    centred = rows - mean
    weighted = centred if weights is None else centred * weights
    product: torch.Tensor = weighted @ centred.transpose(0, 1) / dof
    return product.squeeze()


def corrcoef(x: torch.Tensor) -> torch.Tensor:
    """``torch.corrcoef``: ``cov`` over the outer product of the standard deviations.

    Example:
        >>> x = torch.tensor([[1.0, 2.0, 4.0], [3.0, 1.0, 0.0]])
        >>> torch.allclose(corrcoef(x), torch.corrcoef(x))
        True
    """
    c = cov(x)
    if c.dim() == 0:
        return c / c
    std = c.diagonal().sqrt()
    return (c / std.unsqueeze(1) / std.unsqueeze(0)).clamp(-1, 1)


def combinations(x: torch.Tensor, r: int = 2, with_replacement: bool = False) -> torch.Tensor:
    """``torch.combinations`` of a 1-D input of known length: a gather of the index tuples.

    Example:
        >>> combinations(torch.tensor([10, 20, 30]))
        tensor([[10, 20],
                [10, 30],
                [20, 30]])
    """
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    tuples = list(pick(range(int(x.shape[0])), r))
    index = torch.tensor(tuples, dtype=torch.long).reshape(len(tuples), r)
    return x[index]


def _complex(*tensors: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_complex() for t in tensors)


@contextlib.contextmanager
def traceable_value_checks() -> Iterator[None]:
    """``cov``, ``corrcoef`` and ``combinations`` computed traceably, while active.

    Callers hold the export lock: ``torch`` and ``torch.Tensor`` are patched for the process.

    Example:
        >>> with traceable_value_checks():
        ...     torch.cov(torch.tensor([[1.0, 2.0, 4.0]]))
        tensor(2.3333)
    """
    original_cov, original_corrcoef = torch.cov, torch.corrcoef
    original_combinations = torch.combinations

    def cov_(x: Any, *, correction: int = 1, fweights: Any = None, aweights: Any = None) -> Any:
        if _complex(x, fweights, aweights) or not isinstance(x, torch.Tensor):
            return original_cov(x, correction=correction, fweights=fweights, aweights=aweights)
        return cov(x, correction=correction, fweights=fweights, aweights=aweights)

    def corrcoef_(x: Any) -> Any:
        if _complex(x) or not isinstance(x, torch.Tensor) or x.dim() > 2:
            return original_corrcoef(x)
        return corrcoef(x)

    def combinations_(x: Any, r: int = 2, with_replacement: bool = False) -> Any:
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or r < 1:
            return original_combinations(x, r, with_replacement)
        if not isinstance(x.shape[0], int):
            return original_combinations(x, r, with_replacement)
        return combinations(x, r, with_replacement)

    def cov_method(
        self: Any, *, correction: int = 1, fweights: Any = None, aweights: Any = None
    ) -> Any:
        return cov_(self, correction=correction, fweights=fweights, aweights=aweights)

    with swapped(
        (torch, "cov", cov_),
        (torch, "corrcoef", corrcoef_),
        (torch, "combinations", combinations_),
        (torch.Tensor, "cov", cov_method),
        (torch.Tensor, "corrcoef", corrcoef_),
    ):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="value_checked_composites",
    targets=(
        Target("torch", "cov"),
        Target("torch", "corrcoef"),
        Target("torch", "combinations"),
        Target("torch", "Tensor.cov"),
        Target("torch", "Tensor.corrcoef"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="cov/corrcoef check a value with aten.equal; combinations uses masked_select",
    apply=lambda call: traceable_value_checks(),
)
