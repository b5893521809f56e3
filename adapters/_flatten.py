"""Flattening nested values into leaves, in ``torch.utils._pytree``'s order.

The core is :func:`flatten_with_key`, a fast flattener that returns a *structure key*: nested
tuples that compare equal exactly when two values have the same structure. The input adapter
compares keys (a C-level tuple comparison) instead of building :class:`TreeSpec` objects on
every call; :func:`key_from_spec` and ``_keys.spec_from_key`` convert between the
two. ``_matchers`` builds the hot path on top of it: it flattens values that have the
exported structure without building a key at all.

Leaf order is torch's: containers in iteration order, dicts in insertion order, namedtuples and
dataclasses in field order, classes registered with torch's pytree through torch's own
``flatten_fn``. :func:`flatten_with_key` keeps a ``None`` placeholder for every ``None`` (torch
2.13's pytree treats ``None`` as a leaf too); ``tree_flatten`` drops them, so its leaves are
torch's leaves minus the ``None`` s, in the same order.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Any, cast

import numpy as np

from ._json import canonical_json, check_json_value
from ._library_containers import register_library_container
from ._torch import pytree_registry, registry_state
from ._treespec import TreeSpec

__all__ = [
    "flatten_with_key",
    "flatten_arguments",
    "flatten_value",
    "refresh_handlers",
    "BASE_HANDLERS",
    "LEAF_HANDLER",
    "CONTAINER_HANDLERS",
    "Handler",
    "key_from_spec",
    "qualified_name",
    "StructureKey",
]

StructureKey = object
"""A structure key: ``"leaf"``, ``"none"``, or a tuple ``(kind, [attributes...], *children)``."""

Handler = Callable[[Any, list[object]], StructureKey]
"""Appends the leaves of one value and returns its structure key."""


def qualified_name(cls: type) -> str:
    """Return ``module.qualname`` of a class, the name specs record and allow-lists match.

    Example:
        >>> qualified_name(collections.OrderedDict)
        'collections.OrderedDict'
    """
    return f"{cls.__module__}.{cls.__qualname__}"


def flatten_with_key(obj: object, leaves: list[object]) -> StructureKey:
    """Append the leaves of ``obj`` (``None`` placeholders included) and return its key.

    Args:
        obj: The value to flatten.
        leaves: The list the leaves are appended to.

    Returns:
        The structure key of ``obj``.

    Example:
        >>> leaves = []
        >>> flatten_with_key([1, None], leaves), leaves
        (('list', 'leaf', 'none'), [1, None])
    """
    refresh_handlers()
    return flatten_value(obj, leaves)


def flatten_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], leaves: list[object]
) -> StructureKey:
    """Same as ``flatten_with_key((args, kwargs), leaves)``, one level of dispatch shorter.

    Args:
        args: Positional arguments (a tuple).
        kwargs: Keyword arguments (a dict).
        leaves: The list the leaves are appended to.

    Returns:
        The structure key of ``(args, kwargs)``.

    Example:
        >>> args, kwargs = (1,), {"y": None}
        >>> flatten_arguments(args, kwargs, []) == flatten_with_key((args, kwargs), [])
        True
    """
    refresh_handlers()
    arg_keys = _children(args, leaves)
    kwarg_keys = _children(kwargs.values(), leaves)
    return ("tuple", ("tuple", *arg_keys), ("dict", tuple(kwargs), *kwarg_keys))


def refresh_handlers() -> None:
    """Forget cached class decisions when torch got imported or a class was registered.

    Example:
        >>> refresh_handlers()
    """
    global _handlers_state  # noqa: PLW0603  # the class cache is module state
    state = registry_state()
    if state != _handlers_state:
        _handlers.clear()
        _handlers.update(_BASE_HANDLERS)
        _handlers_state = state


def flatten_value(obj: object, leaves: list[object]) -> StructureKey:
    """:func:`flatten_with_key` without the registry check; call :func:`refresh_handlers` first.

    Example:
        >>> refresh_handlers()
        >>> flatten_value((1,), [])
        ('tuple', 'leaf')
    """
    handler = _handlers.get(type(obj))
    if handler is None:
        handler = _classify(type(obj))
    return handler(obj, leaves)


def _children(items: Iterable[object], leaves: list[object]) -> list[StructureKey]:
    """Flatten children; leaves, the most common children, are handled inline."""
    keys: list[StructureKey] = []
    handlers = _handlers
    for child in items:
        handler = handlers.get(type(child))
        if handler is _leaf:
            leaves.append(child)
            keys.append("leaf")
        else:
            keys.append((handler or _classify(type(child)))(child, leaves))
    return keys


def _leaf(obj: object, leaves: list[object]) -> StructureKey:
    leaves.append(obj)
    return "leaf"


def _none(obj: object, leaves: list[object]) -> StructureKey:
    leaves.append(None)
    return "none"


def _tuple(obj: tuple[object, ...], leaves: list[object]) -> StructureKey:
    return ("tuple", *_children(obj, leaves))


def _list(obj: list[object], leaves: list[object]) -> StructureKey:
    return ("list", *_children(obj, leaves))


def _dict(obj: dict[object, object], leaves: list[object]) -> StructureKey:
    return ("dict", tuple(obj), *_children(obj.values(), leaves))


def _classify(cls: type) -> Handler:
    """Pick (and cache) the handler for a class not in the base table."""
    registry = pytree_registry()
    if registry is not None and cls not in registry:
        register_library_container(cls)  # a transformers cache, first met at call time
    handler: Handler
    if _is_namedtuple_class(cls):
        handler = _fields_handler("namedtuple", cls, cast(tuple[str, ...], cls._fields))  # type: ignore[attr-defined]  # checked by _is_namedtuple_class
    elif registry is not None and cls in registry:
        handler = _custom_handler(cls, registry[cls].flatten_fn)
    elif dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        handler = _fields_handler("dataclass", cls, names)
    else:
        handler = _leaf
    _handlers[cls] = handler
    return handler


def _is_namedtuple_class(cls: type) -> bool:
    """Same test as torch's ``is_namedtuple_class``."""
    fields = getattr(cls, "_fields", None)
    return (
        issubclass(cls, tuple)
        and isinstance(fields, tuple)
        and all(type(f) is str for f in fields)
        and callable(getattr(cls, "_make", None))
        and callable(getattr(cls, "_asdict", None))
    )


def _fields_handler(kind: str, cls: type, names: tuple[str, ...]) -> Handler:
    head = (kind, qualified_name(cls), names)

    def flatten_fields(obj: object, leaves: list[object]) -> StructureKey:
        return (*head, *_children([getattr(obj, n) for n in names], leaves))

    return flatten_fields


def _custom_handler(cls: type, flatten_fn: Callable[[Any], tuple[list[object], Any]]) -> Handler:
    type_name = qualified_name(cls)

    def flatten_custom(obj: object, leaves: list[object]) -> StructureKey:
        children, context = flatten_fn(obj)
        where = f"the pytree context of {type_name}"
        text = canonical_json(check_json_value(context, where))
        return ("custom", type_name, text, *_children(children, leaves))

    return flatten_custom


_BASE_HANDLERS: dict[type, Handler] = {
    tuple: _tuple,
    list: _list,
    dict: _dict,
    collections.OrderedDict: _dict,
    collections.defaultdict: _dict,
    collections.deque: _list,
    type(None): _none,
    np.ndarray: _leaf,
    int: _leaf,
    float: _leaf,
    bool: _leaf,
    str: _leaf,
}
_handlers: dict[type, Handler] = dict(_BASE_HANDLERS)

BASE_HANDLERS = MappingProxyType(_BASE_HANDLERS)
"""The classes whose handling never depends on torch's registry, and their handlers."""
LEAF_HANDLER: Handler = _leaf
"""The handler of leaves (identity-compared by the matchers)."""
CONTAINER_HANDLERS: dict[str, Handler] = {"tuple": _tuple, "list": _list, "dict": _dict}
"""Handlers of the builtin container kinds."""
_handlers_state = registry_state()


@functools.lru_cache(maxsize=256)
def key_from_spec(spec: TreeSpec) -> StructureKey:
    """Return the structure key that :func:`flatten_with_key` gives for a value of ``spec``.

    Equal specs give the very same key object (the result is cached), so callers may compare
    keys by identity first.

    Args:
        spec: A tree spec.

    Returns:
        Its key.

    Example:
        >>> from onnx_export.adapters._treespec import LEAF, NONE
        >>> key_from_spec(TreeSpec("list", (LEAF, NONE)))
        ('list', 'leaf', 'none')
    """
    if spec.kind in ("leaf", "none"):
        return spec.kind
    children = [key_from_spec(c) for c in spec.children]
    if spec.kind in ("tuple", "list"):
        return (spec.kind, *children)
    if spec.kind == "dict":
        return ("dict", spec.keys, *children)
    if spec.kind == "custom":
        return ("custom", spec.type_name, spec.context, *children)
    return (spec.kind, spec.type_name, spec.fields, *children)
