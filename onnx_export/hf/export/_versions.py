"""The oldest transformers release the export side works with, checked before it loads one.

``pyproject.toml``'s ``hf`` extra says the same (``transformers>=`` :data:`TRANSFORMERS_FLOOR`).
An older one fails at once, with the installed and the required release and the command
that installs one, instead of somewhere inside a capture patch or a graph builder:
transformers 4.57.6 (measured) builds its masks with ``vmap`` only, indexes experts with
ints, and its vision-language models compute positions, windows and image grids in code
that the capture patches (written for 5.x) do not recognise.
"""

from __future__ import annotations

import importlib.metadata
import re

from onnx_export.hf._errors import CheckpointError

__all__ = ["TRANSFORMERS_FLOOR", "require_transformers"]

#: The oldest transformers release the export side is tested with.
TRANSFORMERS_FLOOR = "5.0"


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
