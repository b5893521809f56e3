"""Register library containers with torch's pytree when they show up as inputs.

``transformers`` caches (``DynamicCache``, ``EncoderDecoderCache``, ...) are not pytree
nodes until something registers them. A model exported with a cache input expects one
at call time too, in a process that may never have exported anything: the input
adapter registers the class, with ``transformers``' own helpers, the first time it
meets one. Nothing is imported unless such an object is passed in.
"""

from __future__ import annotations

import sys

from ._torch import pytree_registry

__all__ = ["is_transformers_cache", "register_library_container"]


def is_transformers_cache(cls: type) -> bool:
    """Whether ``cls`` derives from ``transformers.cache_utils.Cache``.

    Example:
        >>> is_transformers_cache(dict)
        False
    """
    return any(
        base.__module__ == "transformers.cache_utils" and base.__name__ == "Cache"
        for base in cls.__mro__
    )


def register_library_container(cls: type) -> bool:
    """Register ``cls`` with torch's pytree if it is a known library container.

    Returns whether ``cls`` is registered afterwards (``False`` for other classes, or
    when torch or ``transformers`` is not imported).

    Example:
        >>> register_library_container(int)
        False
    """
    registry = pytree_registry()
    if registry is None or "transformers" not in sys.modules:
        return False
    if cls in registry:
        return True
    if not is_transformers_cache(cls):
        return False
    if cls.__name__ == "DynamicCache":
        from transformers.integrations.executorch import register_dynamic_cache_export_support

        register_dynamic_cache_export_support()  # type: ignore[no-untyped-call]
    else:
        try:
            from transformers.exporters.exporter_dynamo import register_pytree_node
        except ImportError:  # older transformers: no generic cache flattening
            return False
        register_pytree_node(cls)
    return cls in registry
