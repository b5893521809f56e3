"""``tensor.data`` read in ``forward``, captured as ``detach()``.

``w.data`` gives the tensor's values without autograd history. I-BERT's quantized layers
read their weight's range that way in every call (``w_transform = w.data.detach()``).
Under torch.export's non-strict tracing ``.data`` of a traced weight is a new fake tensor
that torch does not record as computed from the weight: it becomes a constant of the
program that holds no values ("We found a fake tensor in the exported program
constant's list"), and the export fails, or its file holds no data for it.

While :func:`data_as_detach` is active, reading ``.data`` of a fake (traced) tensor gives
``detach()``: the same values without history, recorded as computed from the weight.
Real tensors, and assigning ``.data``, are unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "data_as_detach"]


@contextlib.contextmanager
def data_as_detach() -> Iterator[None]:
    """``.data`` of a traced tensor is its ``detach()``, while active.

    Example:
        >>> with data_as_detach():
        ...     torch.ones(2).data.tolist()
        [1.0, 1.0]
    """
    original: Any = torch.Tensor.data

    def data(self: torch.Tensor) -> torch.Tensor:
        if is_fake(self):
            return self.detach()
        result: torch.Tensor = original.__get__(self, type(self))
        return result

    with swapped((torch.Tensor, "data", property(data, original.__set__))):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="tensor_data",
    targets=(Target("torch", "Tensor.data"),),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="tensor.data of a traced weight becomes a constant without values",
    apply=lambda call: data_as_detach(),
)
