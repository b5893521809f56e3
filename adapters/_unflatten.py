"""Rebuilding nested values from leaves; classes only from an explicit allow-list.

A spec names classes (namedtuples, dataclasses, registered pytree classes) by
``module.qualname``, but nothing is ever imported from that name. A class comes back as itself
only when the caller passes it in ``allowed_classes``; otherwise the node becomes a plain
``dict`` keyed by field name (or a ``tuple`` for a custom node whose context does not name its
children).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ._errors import LeafCountError, UnsupportedValueError
from ._flatten import qualified_name
from ._library_containers import (
    context_as_dicts,
    is_transformers_cache,
    mark_rebuilt_cache,
    register_library_container,
)
from ._paths import key_names
from ._torch import pytree_registry
from ._treespec import TreeSpec

__all__ = ["tree_unflatten", "compile_unflatten", "allowed_by_name", "in_key_order", "Builder"]

Builder = Callable[[Iterator[object]], object]
"""Builds one node, taking its leaves from an iterator."""


def allowed_by_name(allowed_classes: Sequence[type]) -> dict[str, type]:
    """Index an allow-list by ``module.qualname``.

    Args:
        allowed_classes: Classes the caller trusts to be rebuilt.

    Returns:
        ``{qualified name: class}``.

    Example:
        >>> import collections
        >>> allowed_by_name([collections.OrderedDict])
        {'collections.OrderedDict': <class 'collections.OrderedDict'>}
    """
    return {qualified_name(cls): cls for cls in allowed_classes}


def tree_unflatten(
    spec: TreeSpec, leaves: Sequence[object], *, allowed_classes: Sequence[type] = ()
) -> object:
    """Rebuild a nested value from ``spec`` and its leaves (the inverse of ``tree_flatten``).

    Args:
        spec: The structure.
        leaves: One value per leaf of ``spec``, in order (no ``None`` placeholders).
        allowed_classes: Classes that may be rebuilt, matched by ``module.qualname``.
            Namedtuples, dataclasses and custom nodes of other classes come back as ``dict``
            keyed by field name (a custom node whose context does not name its children comes
            back as a ``tuple``).

    Returns:
        The nested value.

    Raises:
        LeafCountError: ``len(leaves)`` differs from ``spec.num_leaves``.

    Example:
        >>> import collections
        >>> from onnx_export.adapters import tree_flatten
        >>> Point = collections.namedtuple("Point", "x y")
        >>> leaves, spec = tree_flatten({"p": Point(1, None)})
        >>> tree_unflatten(spec, leaves)
        {'p': {'x': 1, 'y': None}}
        >>> tree_unflatten(spec, leaves, allowed_classes=[Point])
        {'p': Point(x=1, y=None)}
    """
    if len(leaves) != spec.num_leaves:
        raise LeafCountError(
            f"tree_unflatten: expected {spec.num_leaves} leaves for this spec, got "
            f"{len(leaves)}. Pass exactly the leaves tree_flatten returned for the value."
        )
    return compile_unflatten(spec, allowed_by_name(allowed_classes))(iter(leaves))


def compile_unflatten(spec: TreeSpec, allowed: Mapping[str, type]) -> Builder:
    """Turn ``spec`` into a function that builds the value from an iterator of leaves.

    Everything that does not depend on the leaves (keys, classes, contexts) is decided here,
    once, so that building is a few calls per node.

    Args:
        spec: The structure.
        allowed: Allowed classes by qualified name (see :func:`allowed_by_name`).

    Returns:
        The builder.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, spec = tree_flatten([1, (2, 3)])
        >>> compile_unflatten(spec, {})(iter([4, 5, 6]))
        [4, (5, 6)]
    """
    if spec.kind == "leaf":
        return _next_leaf
    if spec.kind == "none":
        return _build_none
    kids = tuple(compile_unflatten(c, allowed) for c in spec.children)
    return _NODE_BUILDERS[spec.kind](spec, kids, allowed.get(spec.type_name))


def _next_leaf(it: Iterator[object]) -> object:
    return next(it)


def _build_none(it: Iterator[object]) -> object:
    return None


def _tuple_builder(spec: TreeSpec, kids: tuple[Builder, ...], cls: type | None) -> Builder:
    return lambda it: tuple([k(it) for k in kids])


def _list_builder(spec: TreeSpec, kids: tuple[Builder, ...], cls: type | None) -> Builder:
    return lambda it: [k(it) for k in kids]


def _dict_builder(keys: Sequence[object], kids: Sequence[Builder]) -> Builder:
    pairs = tuple(zip(keys, kids, strict=True))
    return lambda it: {key: k(it) for key, k in pairs}


def _kwargs_builder(
    cls: Callable[..., object], names: Sequence[str], kids: Sequence[Builder]
) -> Builder:
    pairs = tuple(zip(names, kids, strict=True))
    return lambda it: cls(**{name: k(it) for name, k in pairs})


def _mapping_builder(spec: TreeSpec, kids: tuple[Builder, ...], cls: type | None) -> Builder:
    return _dict_builder(spec.keys, kids)


def _namedtuple_builder(spec: TreeSpec, kids: tuple[Builder, ...], cls: type | None) -> Builder:
    if cls is None:
        return _dict_builder(spec.fields, kids)
    return lambda it: cls(*[k(it) for k in kids])


def _dataclass_builder(spec: TreeSpec, kids: tuple[Builder, ...], cls: type | None) -> Builder:
    if cls is None:
        return _dict_builder(spec.fields, kids)
    return _kwargs_builder(cls, spec.fields, kids)


def in_key_order(value: object, keys: Sequence[str] | None) -> object:
    """``value`` with its keys in the order ``keys`` names them, when it is an ordered mapping.

    A ``transformers`` ``ModelOutput`` keeps its keys in the order they were set (a
    decorator adds ``hidden_states`` after the output is made), and its pytree
    ``unflatten_fn`` rebuilds it through the dataclass constructor, in field order. The
    flattening context names the order the model returned; it is restored here.

    Example:
        >>> list(in_key_order(OrderedDict(a=1, b=2), ["b", "a"]).items())
        [('b', 2), ('a', 1)]
    """
    if keys is None or not isinstance(value, OrderedDict) or list(value.keys()) == list(keys):
        return value
    if set(value.keys()) != set(keys):
        return value
    for key in keys:
        value.move_to_end(key)
    return value


def _custom_builder(spec: TreeSpec, kids: tuple[Builder, ...], cls: type | None) -> Builder:
    """Rebuild a registered pytree class: torch's ``unflatten_fn`` when possible."""
    context = spec.context_value
    names = key_names(context, len(kids))
    if cls is None:
        if names is not None:
            return _dict_builder(names, kids)
        if context_as_dicts(context, [None] * len(kids)) is not None:  # a transformers cache
            return lambda it: context_as_dicts(context, [k(it) for k in kids])
        return lambda it: tuple([k(it) for k in kids])
    registry = pytree_registry()
    if registry is not None and cls not in registry:
        register_library_container(cls)  # a transformers cache in a fresh process
    if registry is not None and cls in registry:
        unflatten_fn: Callable[[list[object], Any], object] = registry[cls].unflatten_fn
        if is_transformers_cache(cls):  # a file's output cache: what its tensors cannot say
            return lambda it: mark_rebuilt_cache(
                in_key_order(unflatten_fn([k(it) for k in kids], context), names)
            )
        return lambda it: in_key_order(unflatten_fn([k(it) for k in kids], context), names)
    if names is not None:
        return _kwargs_builder(cls, names, kids)
    raise UnsupportedValueError(
        f"cannot rebuild {spec.type_name}: torch's pytree registry is not available (torch is "
        f"not imported or the class is not registered) and its context {spec.context} does "
        "not name its children. Import torch and the module that registers the class, or "
        "leave the class out of allowed_classes to get a plain tuple."
    )


_NODE_BUILDERS: dict[str, Callable[[TreeSpec, tuple[Builder, ...], type | None], Builder]] = {
    "tuple": _tuple_builder,
    "list": _list_builder,
    "dict": _mapping_builder,
    "namedtuple": _namedtuple_builder,
    "dataclass": _dataclass_builder,
    "custom": _custom_builder,
}
