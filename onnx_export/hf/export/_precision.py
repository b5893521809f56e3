"""The precision an export asks for: the dtype checked, the model and its inputs converted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

from onnx_export.hf._errors import CheckpointError

__all__ = ["Precision", "check_dtype", "in_dtype", "default_dtype", "narrow_args"]

Precision = Literal["float32", "float16", "bfloat16"]


def check_dtype(dtype: str) -> None:
    if dtype not in ("float32", "float16", "bfloat16"):
        raise CheckpointError(
            f"dtype must be 'float32', 'float16' or 'bfloat16', got {dtype!r}. float16 is "
            "the usual choice for CUDA; bfloat16 runs on CUDA (and on CPU computing in "
            "float32, upcast=['bfloat16'])."
        )


def in_dtype(model: Any, dtype: Precision) -> Any:
    """``model`` with floating weights in ``dtype``: itself, or a converted copy.

    Buffers a model keeps in float32 on purpose (rotary ``inv_freq``) stay as they are
    when the weights already have the dtype, as ``from_pretrained(dtype=...)`` leaves them;
    so do the modules it names in ``_keep_in_fp32_modules`` (T5's ``wo``), in a copy too.
    """
    import copy

    import torch

    from onnx_export.capture._half import in_half_precision, kept_float32_names

    target = getattr(torch, dtype)
    kept = kept_float32_names(model, dtype)
    named = model.named_parameters()
    floats = [p.dtype for n, p in named if p.is_floating_point() and n not in kept]
    if all(d == target for d in floats):
        return model
    return (
        in_half_precision(model, dtype) if dtype != "float32" else copy.deepcopy(model).to(target)
    )


@contextlib.contextmanager
def default_dtype(dtype: Precision) -> Iterator[None]:
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def narrow_args(args: Any, dtype: Precision) -> Any:
    """Floating example inputs (pixels, features) in ``dtype``, as the model takes them."""
    import torch
    from torch.utils import _pytree as pytree

    target = getattr(torch, dtype)
    return pytree.tree_map_only(
        torch.Tensor, lambda t: t.to(target) if t.is_floating_point() else t, args
    )
