"""A half-precision export (``ExportOptions(dtype=...)``): the model and inputs converted first.

The user's model is left as it was: a copy is converted (``Module.to``: floating parameters
and buffers only). Floating example inputs wider than the target (float32, float64) are
converted too; integer and bool inputs are left alone.

Modules a ``transformers`` model names in ``_keep_in_fp32_modules`` (in float16 only) or
``_keep_in_fp32_modules_strict`` (float16 and bfloat16) stay in float32, as
``from_pretrained(dtype=...)`` leaves them: T5 keeps its feed-forward output ``wo`` so,
because it overflows float16. A name is kept when a pattern (``*`` for any characters)
is found in it, transformers' rule. Such a module gets its floating inputs cast to float32
on the way in (a no-op where the model casts them itself, as T5 does), so the graph computes
them in float32 between two ``Cast`` nodes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnx_export._fake import has_no_data
from onnx_export.errors import ExportInputError

__all__ = ["half_precision_call", "in_half_precision", "kept_float32_names", "kept_in_float32"]

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
    converted = in_half_precision(module, dtype)

    def narrow(t: torch.Tensor) -> torch.Tensor:
        return t.to(target) if t.dtype in _WIDER else t

    new_args, new_kwargs = pytree.tree_map_only(torch.Tensor, narrow, (args, kwargs))
    return converted, tuple(new_args), dict(new_kwargs)


def kept_in_float32(module: torch.nn.Module, dtype: str) -> tuple[str, ...]:
    """The module name patterns ``module`` (or a module in it) keeps in float32 in ``dtype``.

    Example:
        >>> class Model(torch.nn.Module):
        ...     _keep_in_fp32_modules = ["wo"]
        >>> kept_in_float32(Model(), "float16"), kept_in_float32(Model(), "bfloat16")
        (('wo',), ())
    """
    patterns: set[str] = set()
    for sub in module.modules():  # a wrapper's model declares them, or a model's submodels
        patterns.update(getattr(sub, "_keep_in_fp32_modules_strict", None) or ())
        if dtype == "float16":
            patterns.update(getattr(sub, "_keep_in_fp32_modules", None) or ())
    return tuple(sorted(patterns))


def _matcher(patterns: Iterable[str]) -> re.Pattern[str] | None:
    branches = [p.replace("*", ".*") for p in patterns]
    return re.compile("|".join(f"(?:{b})" for b in branches)) if branches else None


def kept_float32_names(module: torch.nn.Module, dtype: str) -> frozenset[str]:
    """The parameter and buffer names of ``module`` kept in float32 in ``dtype``."""
    kept = _matcher(kept_in_float32(module, dtype))
    if kept is None:
        return frozenset()
    names = [n for n, _ in (*module.named_parameters(), *module.named_buffers())]
    return frozenset(n for n in names if kept.search(n))


def _to_float32(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    def widen(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t

    return pytree.tree_map_only(torch.Tensor, widen, (args, kwargs))  # type: ignore[no-any-return]  # pytree is untyped


def _cast_inputs(_module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
    return _to_float32(*args, **kwargs)


def in_half_precision(module: torch.nn.Module, dtype: str) -> torch.nn.Module:
    """A copy of ``module`` in ``dtype``, the modules it keeps in float32 (see above) kept.

    The kept weights are copied from ``module`` (exact when they are float32 there), and
    each kept module casts its half-precision inputs to float32.

    Example:
        >>> class Model(torch.nn.Module):
        ...     _keep_in_fp32_modules = ["wo"]
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.wi, self.wo = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        ...     def forward(self, x):
        ...         return self.wo(self.wi(x))
        >>> half = in_half_precision(Model(), "float16")
        >>> half.wi.weight.dtype, half.wo.weight.dtype
        (torch.float16, torch.float32)
        >>> half(torch.ones(1, 2, dtype=torch.float16)).dtype
        torch.float32
    """
    converted = copy.deepcopy(module).to(getattr(torch, dtype))
    kept = _matcher(kept_in_float32(module, dtype))
    if kept is None:
        return converted
    originals: dict[str, torch.Tensor] = dict(module.named_parameters())
    originals.update(module.named_buffers())
    for name, value in [*converted.named_parameters(), *converted.named_buffers()]:
        if value.is_floating_point() and name in originals and kept.search(name):
            value.data = originals[name].detach().to(torch.float32, copy=True)
    for name, sub in converted.named_modules():
        if name and kept.search(name) and not any(True for _ in sub.children()):
            sub.register_forward_pre_hook(_cast_inputs, with_kwargs=True)
    return converted
