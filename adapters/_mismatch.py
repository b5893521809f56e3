"""Explaining how call-time inputs differ in structure from the exported ones.

Only runs on the error path: it walks the expected :class:`TreeSpec` next to the actual value
and describes the first difference by display path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

from ._flatten import flatten_with_key
from ._paths import child_accessors
from ._spec import LeafSpec
from ._torch import pytree_registry
from ._treespec import TreeSpec

__all__ = ["first_mismatch", "describe_value", "reorder_dicts_like"]

_CONTAINER_TYPES = {"tuple": tuple, "list": list}


def describe_value(value: object) -> str:
    """Say in words what a value is, for messages.

    Example:
        >>> describe_value({"a": 1}), describe_value((1, 2)), describe_value(3)
        ("a dict with keys ['a']", 'a tuple of length 2', 'int 3')
    """
    cls = type(value)
    if value is None or isinstance(value, bool | int | float | str):
        return "None" if value is None else f"{cls.__name__} {value!r:.40}"
    if isinstance(value, dict):
        return f"a dict with keys {list(value)}"
    if isinstance(value, tuple | list) and cls in (tuple, list):
        return f"a {cls.__name__} of length {len(value)}"
    name = f"{cls.__module__}.{cls.__qualname__}".removeprefix("builtins.")
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    details = "" if shape is None or dtype is None else f" of dtype {dtype}, shape {tuple(shape)}"
    return f"a {name}{details}"


def _describe_spec(spec: TreeSpec, leaf: LeafSpec | None) -> str:
    if spec.kind == "leaf":
        if leaf is not None and leaf.tensor is not None:
            return f"a tensor ({leaf.tensor.dtype}, shape {leaf.tensor.shape})"
        return f"the constant {leaf.value!r}" if leaf is not None else "a tensor or constant"
    if spec.kind in ("none", "dict", "tuple", "list"):
        return {
            "none": "None (the model was exported with None here)",
            "dict": f"a dict with keys {list(spec.keys)}",
        }.get(spec.kind, f"a {spec.kind} of length {len(spec.children)}")
    short = spec.type_name.rsplit(".", 1)[-1]
    if spec.fields:
        return f"a {spec.kind} {short} with fields {list(spec.fields)}"
    return f"a {short} (a {spec.kind} pytree node with {len(spec.children)} children)"


def first_mismatch(
    spec: TreeSpec, value: object, path: str, leaves: Sequence[LeafSpec]
) -> str | None:
    """Describe the first place where ``value`` does not have the structure ``spec``.

    Args:
        spec: The expected structure.
        value: The actual value.
        path: Display path of ``value``.
        leaves: The leaf specs of ``spec``, in order (used to say "a tensor", "the constant").

    Returns:
        ``"<path>: expected <what>, got <what>"``, or ``None`` if the structures match.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, spec = tree_flatten({"a": 1})
        >>> print(first_mismatch(spec, {"b": 1}, "x", [LeafSpec("x['a']", "constant", value=1)]))
        x: expected a dict with keys ['a'], got a dict with keys ['b'] (missing 'a'; unexpected 'b')
    """
    return _walk(spec, value, path, iter(leaves))


def _walk(spec: TreeSpec, value: object, path: str, leaves: Iterator[LeafSpec]) -> str | None:
    got_key = flatten_with_key(value, [])
    same_node = _same_node(spec, got_key)
    leaf = next(leaves, None) if spec.kind == "leaf" else None
    if not same_node:
        detail = _dict_detail(spec, value) if spec.kind == "dict" else ""
        return f"{path}: expected {_describe_spec(spec, leaf)}, got {describe_value(value)}{detail}"
    if spec.kind in ("leaf", "none"):
        return None
    children = _children_of(spec, value)
    for child_spec, child, pair in zip(spec.children, children, child_accessors(spec), strict=True):
        problem = _walk(child_spec, child, path + pair[0], leaves)
        if problem:
            return problem
    return None


def _same_node(spec: TreeSpec, key: object) -> bool:
    """Whether the top node (kind, length, keys, type) matches, ignoring the children."""
    if spec.kind in ("leaf", "none"):
        return key == spec.kind
    if not isinstance(key, tuple) or key[0] != spec.kind:
        return False
    head = 1 if spec.kind in _CONTAINER_TYPES else 2 if spec.kind == "dict" else 3
    if len(key) - head != len(spec.children):
        return False
    if spec.kind == "dict":
        return cast(tuple[object, ...], key[1]) == spec.keys
    if spec.kind in ("namedtuple", "dataclass"):
        return key[1:3] == (spec.type_name, spec.fields)
    return key[1:3] == (spec.type_name, spec.context) if spec.kind == "custom" else True


def _dict_detail(spec: TreeSpec, value: object) -> str:
    if not isinstance(value, dict):
        return ""
    missing = [k for k in spec.keys if k not in value]
    unexpected = [k for k in value if k not in spec.keys]
    parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    parts += [f"unexpected {', '.join(map(repr, unexpected))}"] if unexpected else []
    return f" ({'; '.join(parts)})" if parts else ""


def _children_of(spec: TreeSpec, value: object) -> list[object]:
    if spec.kind in _CONTAINER_TYPES:
        return list(cast(Sequence[object], value))
    if spec.kind == "dict":
        return list(cast(dict[object, object], value).values())
    if spec.kind in ("namedtuple", "dataclass"):
        return [getattr(value, f) for f in spec.fields]
    registry = pytree_registry() or {}
    children, _ = registry[type(value)].flatten_fn(value)  # custom: matched, so registered
    return list(children)


def reorder_dicts_like(spec: TreeSpec, value: object) -> object:
    """Return ``value`` with every dict reordered to the key order of ``spec``, when possible.

    Dicts whose key set differs are left alone (the structure check then reports them).

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, spec = tree_flatten({"a": 1, "b": [2]})
        >>> reorder_dicts_like(spec, {"b": [3], "a": 4})
        {'a': 4, 'b': [3]}
    """
    if spec.kind == "dict" and isinstance(value, dict) and set(value) == set(spec.keys):
        return {
            k: reorder_dicts_like(c, value[k])
            for k, c in zip(spec.keys, spec.children, strict=True)
        }
    container = _CONTAINER_TYPES.get(spec.kind)
    if container is not None and type(value) is container:
        items = cast(Sequence[object], value)
        if len(items) == len(spec.children):
            return container(
                reorder_dicts_like(c, v) for c, v in zip(spec.children, items, strict=True)
            )
    return value
