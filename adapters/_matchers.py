"""Matchers: the hot path of flattening call-time inputs that have the exported structure.

A matcher walks a value along the exported :class:`TreeSpec`, appending leaves, and gives up
(returns False) at the first difference; no structure key is built. Only classes whose handling
cannot change with torch's registry are trusted here (builtins, numpy arrays, torch tensors);
anything else makes the match fail, and the generic flattener of :mod:`._flatten`
decides, with the structure check explaining any difference.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ._flatten import (
    BASE_HANDLERS,
    CONTAINER_HANDLERS,
    LEAF_HANDLER,
    Handler,
    StructureKey,
    flatten_value,
    key_from_spec,
    refresh_handlers,
)
from ._treespec import TreeSpec

__all__ = ["Matcher", "ArgumentsMatcher", "compile_matcher"]

_leaf = LEAF_HANDLER
_dict = CONTAINER_HANDLERS["dict"]
_stable: dict[type, Handler] = dict(BASE_HANDLERS)
"""Classes the matchers trust: the base table, and torch tensor classes once seen."""


Matcher = Callable[[object, list[object]], bool]
"""Appends a value's leaves and returns True when it has the expected structure, else False."""


class ArgumentsMatcher:
    """Flattens canonical ``(args, kwargs)`` that have the exported structure, fast.

    The hot path of every call: arguments that are leaves are checked inline, containers by
    their compiled matchers; no structure key is built. Only classes whose handling cannot
    change (builtins, numpy arrays, torch tensors) are trusted here; any other class makes
    the match fail, and the generic flattener decides. A call returns False as soon as
    anything differs (the leaves list is then incomplete and must be discarded).

    Args:
        tree: The input tree, ``(args tuple, kwargs dict)``.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, tree = tree_flatten(((1,), {"y": [2, None]}))
        >>> leaves = []
        >>> ArgumentsMatcher(tree)((5,), {"y": [6, None]}, leaves), leaves
        (True, [5, 6, None])
        >>> ArgumentsMatcher(tree)((5,), {"y": [6]}, [])
        False
    """

    def __init__(self, tree: TreeSpec) -> None:
        args_tree, kwargs_tree = tree.children
        self._n_args = len(args_tree.children)
        self._keys = kwargs_tree.keys
        self._matchers = tuple(
            None if c.kind == "leaf" else compile_matcher(c)
            for c in args_tree.children + kwargs_tree.children
        )

    def __call__(
        self, args: tuple[object, ...], kwargs: dict[str, object], leaves: list[object]
    ) -> bool:
        """Append the leaves of ``(args, kwargs)``; False if the structure differs."""
        if len(args) != self._n_args or tuple(kwargs) != self._keys:
            return False
        handlers = _stable
        for match, value in zip(self._matchers, (*args, *kwargs.values())):  # noqa: B905  # same length; strict= is slow
            if match is not None:
                if not match(value, leaves):
                    return False
            elif handlers.get(type(value)) is _leaf or _is_leaf_type(type(value)):
                leaves.append(value)
            else:
                return False
        return True


def compile_matcher(spec: TreeSpec) -> Matcher:
    """Return a :data:`Matcher` for values of structure ``spec``.

    Tuples, lists and dicts get dedicated matchers (containers of leaves check their children
    inline); other nodes compare the generic structure key.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> leaves = []
        >>> compile_matcher(tree_flatten({"a": 1, "b": 2})[1])({"a": 3, "b": 4}, leaves), leaves
        (True, [3, 4])
    """
    if spec.kind == "leaf":
        return _match_leaf
    if spec.kind == "none":
        return _match_none
    if spec.kind not in CONTAINER_HANDLERS:
        return _key_matcher(key_from_spec(spec))
    handler = CONTAINER_HANDLERS[spec.kind]
    if all(c.kind == "leaf" for c in spec.children):
        return _leaves_container_matcher(handler, spec.keys, len(spec.children))
    return _container_matcher(handler, spec.keys, tuple(compile_matcher(c) for c in spec.children))


def _is_leaf_type(cls: type) -> bool:
    """On a miss in :data:`_stable`: torch tensor classes are leaves (and get remembered)."""
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(cls, torch.Tensor):
        _stable[cls] = _leaf
        return True
    return False


def _match_leaf(value: object, leaves: list[object]) -> bool:
    if _stable.get(type(value)) is _leaf or _is_leaf_type(type(value)):
        leaves.append(value)
        return True
    return False


def _match_none(value: object, leaves: list[object]) -> bool:
    if value is None:
        leaves.append(None)
        return True
    return False


def _leaves_container_matcher(handler: Handler, keys: tuple[object, ...], size: int) -> Matcher:
    is_dict = handler is _dict

    def match_leaves(value: Any, leaves: list[object]) -> bool:
        if _stable.get(type(value)) is not handler or len(value) != size:
            return False
        if is_dict and tuple(value) != keys:
            return False
        items = value.values() if is_dict else value
        for item in items:
            if _stable.get(type(item)) is not _leaf and not _is_leaf_type(type(item)):
                return False
        leaves.extend(items)
        return True

    return match_leaves


def _container_matcher(
    handler: Handler, keys: tuple[object, ...], kids: tuple[Matcher, ...]
) -> Matcher:
    is_dict = handler is _dict
    size = len(kids)

    def match_container(value: Any, leaves: list[object]) -> bool:
        if _stable.get(type(value)) is not handler or len(value) != size:
            return False
        if is_dict and tuple(value) != keys:
            return False
        items = value.values() if is_dict else value
        for match, item in zip(kids, items):  # noqa: B905, SIM110  # same length; no generator
            if not match(item, leaves):
                return False
        return True

    return match_container


def _key_matcher(expected: StructureKey) -> Matcher:
    def match_key(value: object, leaves: list[object]) -> bool:
        found: list[object] = []
        refresh_handlers()
        if flatten_value(value, found) != expected:
            return False
        leaves.extend(found)
        return True

    return match_key
