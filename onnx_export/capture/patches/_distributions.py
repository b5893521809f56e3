"""``torch.distributions`` built while torch.export traces: no argument validation.

A distribution checks its parameters when it is built (``StudentT(df, loc, scale)``:
``scale > 0``, ...) and a value when it scores it (``log_prob``), by default:
``if not constraint.check(value).all(): raise ValueError``. That asks Python for a
tensor's value; torch.export traces without values and stops there ("Could not guard on
data-dependent expression", at transformers' ``time_series_utils.py``
``self.distribution_class(*distr_args)`` for the time-series prediction heads).

While :func:`distribution_checks_off` is active, distributions are built without that
validation (``Distribution.set_default_validate_args(False)``, torch's own switch). On
parameters and values the checks accept, every number is the same as eagerly; the
exported graph has no check (ONNX has no assertion), so parameters the checks would
refuse give what the formulas give (NaN, inf) instead of eager's ``ValueError``. A
distribution built with ``validate_args=True`` explicitly still checks, and fails to
capture as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from onnx_export.capture.patches._registry import Patch, Target

__all__ = ["PATCH", "distribution_checks_off"]


@contextlib.contextmanager
def distribution_checks_off() -> Iterator[None]:
    """Distributions skip their default argument validation, while active.

    Example:
        >>> with distribution_checks_off():
        ...     torch.distributions.Normal(0.0, -1.0).scale
        tensor(-1.)
    """
    distribution = torch.distributions.Distribution
    before = distribution._validate_args
    distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        distribution.set_default_validate_args(before)


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="distributions",
    targets=(
        Target("torch.distributions", "Distribution.set_default_validate_args"),
        Target("torch.distributions", "Distribution._validate_args"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="distributions validate their arguments with if not check(value).all(): raise",
    apply=lambda call: distribution_checks_off(),
)
