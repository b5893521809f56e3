"""Make library containers in the example inputs flattenable by torch.export.

torch.export flattens inputs and outputs with torch's pytree registry. ``transformers``
caches (``DynamicCache``, ...) are not registered until something asks: a user passing
``cache=DynamicCache(...)`` would otherwise get "Unsupported input type". They are
registered (by the adapters' helper, which the input adapter also uses at call time)
the first time one appears among the inputs, so the cache goes in and comes out of the
ONNX model as its key and value tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch.utils._pytree as pytree

from adapters._library_containers import register_library_container

__all__ = ["register_input_containers"]

_MAX_DEPTH = 8


def _walk(value: Any, depth: int = 0) -> Iterator[Any]:
    yield value
    if depth >= _MAX_DEPTH:
        return
    children: Any = ()
    if isinstance(value, dict):
        children = value.values()
    elif isinstance(value, (list, tuple)):
        children = value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    for child in children:
        yield from _walk(child, depth + 1)


def register_input_containers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Register the library containers (``transformers`` caches) found in the inputs.

    Returns the qualified names of the classes this call registered.
    """
    registered: list[str] = []
    seen: set[type] = set()
    for value in _walk((args, kwargs)):
        cls = type(value)
        if cls in seen or cls in pytree.SUPPORTED_NODES:
            continue
        seen.add(cls)
        if register_library_container(cls):
            registered.append(f"{cls.__module__}.{cls.__qualname__}")
    return registered
