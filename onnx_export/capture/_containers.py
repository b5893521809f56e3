"""Make library containers in the example inputs and outputs flattenable by torch.export.

torch.export flattens inputs and outputs with torch's pytree registry. ``transformers``
caches (``DynamicCache``, ``EncoderDecoderCache``, ...) are not registered until something
asks: a user passing ``cache=DynamicCache(...)`` would get "Unsupported input type", and a
causal LM called with ``use_cache`` left at its default returns a cache that torch.export
calls "not a known type". Every cache class ``transformers`` has defined is registered
before capture (the same registration the adapters do at call time), so a cache goes in
and comes out of the ONNX model as its key and value tensors, from the first export on.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from onnx_export.adapters._flatten import flatten_arguments
from onnx_export.adapters._library_containers import register_transformers_caches, slid_cache_in
from onnx_export.errors import ExportInputError

__all__ = ["register_input_containers", "register_library_containers"]


def register_input_containers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Register the library containers (``transformers`` caches) found in the inputs."""
    # Only the registration is wanted here: inputs the adapter cannot describe (or a
    # custom class whose flattening raises) fail later, where they did before.
    with contextlib.suppress(Exception):
        flatten_arguments(args, kwargs, [])


def register_library_containers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[type]:
    """Register every ``transformers`` cache class, and any container met in the inputs.

    Returns:
        The cache classes registered (empty when ``transformers`` is not imported).

    Raises:
        ExportInputError: An example cache the file could not be called with: a
            sliding-window cache that has slid (its tensors no longer say how many
            tokens it has seen, so neither the capture nor the file can place the new
            ones).
    """
    registered = register_transformers_caches() if "transformers" in sys.modules else []
    register_input_containers(args, kwargs)
    problem = slid_cache_in(args, kwargs)
    if problem is not None:
        raise ExportInputError(f"The example's {problem}")
    return registered
