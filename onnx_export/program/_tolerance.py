"""How far ONNX Runtime's outputs are from eager's, in units of the checks' tolerance.

The served-axes check and the edge probe compare whole outputs (a whisper encoder's is
1,500 x 384 per row) against eager PyTorch: ``|got - want| / (1e-4 + 1e-3 |want|)``, its
largest value, where 1 is the edge of the tolerance. Computed in float64 that takes a
copy of each output in float64 and ten passes over them; the checks only ask whether
the worst is below 1 (right at the example) or 10 (another size), and say its value
only above those. A float32 output is therefore measured in float32 first, in place
(its rounding moves the result by a few parts in 10^7): a result at most half a unit is
the answer, and anything else is measured again in float64, exactly as before.
"""

from __future__ import annotations

import math

import torch

__all__ = ["tolerance_units"]

#: A float32 result at most this is returned as it is: no check's verdict can change.
_SURE_BELOW = 0.5


def _float64_units(got: torch.Tensor, want: torch.Tensor) -> float:
    a64, b64 = got.double(), want.double()
    same_nan = torch.isnan(a64) & torch.isnan(b64)
    diff = ((a64 - b64).abs() / (1e-4 + 1e-3 * b64.abs())).masked_fill(same_nan, 0.0)
    return float(diff.nan_to_num(math.inf).max()) if diff.numel() else 0.0


def _float32_units(got: torch.Tensor, want: torch.Tensor) -> float | None:
    """The worst in float32, or ``None`` when a NaN is involved (float64 decides)."""
    scale = want.abs().mul_(1e-3).add_(1e-4)
    diff = got.sub(want).abs_().div_(scale)
    worst = float(diff.max())
    return None if math.isnan(worst) else worst


def tolerance_units(got: torch.Tensor, want: torch.Tensor) -> float:
    """The worst ``|got - want| / (1e-4 + 1e-3 |want|)`` of two same-shape float tensors.

    NaNs in the same places agree; a NaN against a number, or an infinity, is beyond any
    tolerance.
    """
    if not want.numel():
        return 0.0
    if got.dtype == want.dtype == torch.float32:
        quick = _float32_units(got, want)
        if quick is not None and quick <= _SURE_BELOW:
            return quick
    return _float64_units(got, want)
