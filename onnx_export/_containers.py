"""Make library containers in the example inputs flattenable by torch.export.

torch.export flattens inputs and outputs with torch's pytree registry. ``transformers``
caches (``DynamicCache``, ...) are not registered until something asks: a user passing
``cache=DynamicCache(...)`` would otherwise get "Unsupported input type". The input
adapter's flattening registers such a class the first time it meets one (the same step
that lets a loaded model take one at call time), so flattening the example inputs once
before capture is all it takes; the cache then goes in and comes out of the ONNX model
as its key and value tensors.
"""

from __future__ import annotations

import contextlib
from typing import Any

from onnx_export.adapters._flatten import flatten_arguments

__all__ = ["register_input_containers"]


def register_input_containers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Register the library containers (``transformers`` caches) found in the inputs."""
    # Only the registration is wanted here: inputs the adapter cannot describe (or a
    # custom class whose flattening raises) fail later, where they did before.
    with contextlib.suppress(Exception):
        flatten_arguments(args, kwargs, [])
