"""A half-precision export (``ExportOptions(dtype=...)``): the model and inputs converted first.

The user's model is left as it was: a copy is converted (``Module.to``: floating parameters
and buffers only). Floating example inputs wider than the target (float32, float64) are
converted too; integer and bool inputs are left alone.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnx_export._fake import has_no_data
from onnx_export.errors import ExportInputError

__all__ = ["half_precision_call"]

_WIDER = (torch.float32, torch.float64)


def half_precision_call(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dtype: str
) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """``module``'s converted copy and the inputs converted to ``dtype``.

    Raises:
        ExportInputError: The model holds fake or meta weights (a copy cannot be converted
            without data); convert the model before exporting it.

    Example:
        >>> m, args, _ = half_precision_call(torch.nn.Linear(2, 2), (torch.ones(1, 2),), {},
        ...                                   "float16")
        >>> m.weight.dtype, args[0].dtype
        (torch.float16, torch.float16)
    """
    target = getattr(torch, dtype)
    if any(has_no_data(p) for p in (*module.parameters(), *module.buffers())):
        raise ExportInputError(
            f"ExportOptions(dtype={dtype!r}) converts a copy of the model, and this model's "
            f"weights hold no data (fake or meta tensors). Convert the model itself first "
            f"(model.to(torch.{dtype})) and export without dtype."
        )
    converted = copy.deepcopy(module).to(target)

    def narrow(t: torch.Tensor) -> torch.Tensor:
        return t.to(target) if t.dtype in _WIDER else t

    new_args, new_kwargs = pytree.tree_map_only(torch.Tensor, narrow, (args, kwargs))
    return converted, tuple(new_args), dict(new_kwargs)
