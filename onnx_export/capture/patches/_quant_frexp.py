"""I-BERT's ``batch_frexp`` (numpy's ``frexp`` on a traced tensor), captured as torch ops.

I-BERT's fixed-point multiply (``FixedPointMul``) splits each rescaling factor into an
integer mantissa and a power of two, in numpy and Python's ``decimal``::

    output_m, output_e = np.frexp(inputs.cpu().numpy())
    m = int(Decimal(m * 2**max_bit).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    output_e = float(max_bit) - output_e

torch.export traces with values it does not have, so numpy cannot run (".numpy() is not
supported for tensor subclasses"). While :func:`torch_frexp` is active, a module's
``batch_frexp`` of that form (transformers' I-BERT ``quant_modules``, and any module
copied from it) is replaced by the same computation in torch ops: ``torch.frexp`` (C's
``frexp``, as numpy's), the mantissa scaled by ``2**max_bit`` (exact in float64: a power
of two) and rounded half away from zero (``ROUND_HALF_UP``; torch's ``round`` goes to
even), giving the int64 mantissas and float64 exponents numpy gives. The replacement is
exact: every step is exact in float64 for mantissas below ``2**53``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "batch_frexp", "torch_frexp"]

#: Modules whose ``batch_frexp`` is I-BERT's (the module's name ends with this).
_MODULE_SUFFIX = ".quant_modules"


def batch_frexp(inputs: torch.Tensor, max_bit: int = 31) -> tuple[torch.Tensor, torch.Tensor]:
    """I-BERT's ``batch_frexp`` in torch ops: integer mantissas and ``max_bit - exponent``.

    Example:
        >>> m, e = batch_frexp(torch.tensor([0.75, 3.0], dtype=torch.float64))
        >>> m.tolist(), e.tolist()
        ([1610612736, 1610612736], [31.0, 29.0])
    """
    mantissa, exponent = torch.frexp(inputs.to(torch.float64))
    scaled = mantissa * float(2**max_bit)
    rounded = torch.where(scaled >= 0, torch.floor(scaled + 0.5), torch.ceil(scaled - 0.5))
    return rounded.to(torch.int64), float(max_bit) - exponent.to(torch.float64)


def _quantizer_modules() -> list[Any]:
    return [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("transformers.") and name.endswith(_MODULE_SUFFIX)
        and callable(getattr(module, "batch_frexp", None))
        and hasattr(module, "np")
    ]  # fmt: skip


@contextlib.contextmanager
def torch_frexp() -> Iterator[None]:
    """I-BERT's numpy ``batch_frexp`` is computed with torch ops, while active.

    Example:
        >>> with torch_frexp():
        ...     pass
    """
    modules = _quantizer_modules()  # patched while capturing (under EXPORT_LOCK)
    with swapped(*((module, "batch_frexp", batch_frexp) for module in modules)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="quant_frexp",
    targets=(
        Target("torch", "frexp"),
        Target(
            "transformers.models.ibert.quant_modules",
            "batch_frexp",
            ("inputs", "max_bit"),
            example=True,
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="I-BERT's batch_frexp runs numpy on a traced tensor",
    apply=lambda call: torch_frexp(),
)
