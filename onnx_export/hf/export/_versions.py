"""The oldest transformers release the export side works with, checked before it loads one.

``pyproject.toml``'s ``hf`` extra says the same (``transformers>=`` :data:`TRANSFORMERS_FLOOR`).
An older one fails at once, with the installed and the required release and the command
that installs one, instead of somewhere inside a capture patch or a graph builder. The floor
is measured, not assumed: CI (``.ci/run``) reads it from this file and runs ``tests/hf``,
``tests/e2e`` and the capture patches' tests on exactly that release. Older releases fail
them (measured by bisection: 4.57.6 builds its masks with ``vmap`` only and indexes experts
with ints; 5.0.0, 5.4.0, 5.16.0 and 5.20.0 compute multimodal positions, vision windows and
any-resolution grids in code the capture patches do not recognise, lack some patches'
targets, and register ``DynamicCache`` with torch's pytree differently; 5.22.0 and 5.23.0
name the decoders' cache argument ``past_key_values`` only, where 5.24 accepts ``cache``;
5.24.0 failed only the fused decoder's tests, from a bug of ours since fixed: not yet
re-measured).
"""

from __future__ import annotations

import importlib.metadata
import re

from onnx_export.hf._errors import CheckpointError

__all__ = ["TRANSFORMERS_FLOOR", "require_transformers"]

#: The oldest transformers release the export side is tested with.
TRANSFORMERS_FLOOR = "5.25"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+", maxsplit=1)[0])[:3])


def require_transformers(version: str | None = None) -> None:
    """Raise :class:`CheckpointError` when transformers ``version`` predates the floor.

    Args:
        version: The release to check; the installed one by default (nothing is checked
            when transformers is not installed: loading says so).

    Example:
        >>> require_transformers("5.25.0")
        >>> require_transformers("4.57.6")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        onnx_export.hf._errors.CheckpointError: transformers 4.57.6 is installed; ...
    """
    if version is None:
        try:
            version = importlib.metadata.version("transformers")
        except importlib.metadata.PackageNotFoundError:
            return
    if _release(version) < _release(TRANSFORMERS_FLOOR):
        raise CheckpointError(
            f"transformers {version} is installed; exporting a checkpoint needs transformers "
            f">= {TRANSFORMERS_FLOOR} (the oldest release this exporter is tested with). Run: "
            f"pip install -U 'transformers>={TRANSFORMERS_FLOOR}'"
        )
