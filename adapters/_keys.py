"""Converting structure keys to :class:`TreeSpec` s, and the public ``tree_flatten``."""

from __future__ import annotations

from typing import Any, cast

from ._errors import UnsupportedValueError
from ._flatten import StructureKey, flatten_with_key
from ._paths import accessors
from ._treespec import LEAF, NONE, DictKey, TreeSpec

__all__ = ["tree_flatten", "spec_from_key"]


def tree_flatten(obj: object) -> tuple[list[object], TreeSpec]:
    """Flatten a nested value into its leaves and a :class:`TreeSpec`.

    Leaves come in ``torch.utils._pytree.tree_flatten``'s order for the same value, without the
    ``None`` s (``None`` becomes a ``none`` node with no leaf). Tensors, arrays, numbers and
    strings are leaves. When torch is imported, classes registered with its pytree (for
    example ``transformers``' ``ModelOutput``) flatten through torch's registry and become
    ``custom`` nodes.

    Args:
        obj: The value to flatten.

    Returns:
        The leaves and the spec.

    Raises:
        UnsupportedValueError: A dict key is not str/int/bool/None, or a registered class has a
            context that is not JSON data.

    Example:
        >>> leaves, spec = tree_flatten({"a": 1, "b": (None, 2.0)})
        >>> leaves
        [1, 2.0]
        >>> spec.kind, spec.keys, spec.num_leaves
        ('dict', ('a', 'b'), 2)
    """
    leaves: list[object] = []
    key = flatten_with_key(obj, leaves)
    return [leaf for leaf in leaves if leaf is not None], spec_from_key(key, "value")


def spec_from_key(key: StructureKey, path: str) -> TreeSpec:
    """Build the :class:`TreeSpec` that a structure key describes.

    Args:
        key: A key from :func:`flatten_with_key`.
        path: Display path of the value, for error messages.

    Returns:
        The spec.

    Raises:
        UnsupportedValueError: A dict key is not str/int/bool/None.

    Example:
        >>> spec_from_key(("tuple", "leaf", "none"), "x").num_leaves
        1
    """
    if key == "leaf":
        return LEAF
    if key == "none":
        return NONE
    parts = cast(tuple[Any, ...], key)
    kind = parts[0]
    attrs: dict[str, Any] = {}
    if kind in ("tuple", "list"):
        child_keys = parts[1:]
    elif kind == "dict":
        attrs["keys"] = tuple(_check_dict_key(k, path) for k in parts[1])
        child_keys = parts[2:]
    else:
        attrs["type_name"] = parts[1]
        attrs["context" if kind == "custom" else "fields"] = parts[2]
        child_keys = parts[3:]
    labels = accessors(
        kind,
        len(child_keys),
        keys=attrs.get("keys", ()),
        fields=attrs.get("fields", ()),
        context=attrs.get("context", "null"),
    )
    children = tuple(spec_from_key(k, path + labels[i][0]) for i, k in enumerate(child_keys))
    return TreeSpec(kind, children, **attrs)


def _check_dict_key(key: object, path: str) -> DictKey:
    if key is None or type(key) in (str, int, bool):
        return cast(DictKey, key)
    raise UnsupportedValueError(
        f"{path}: expected dict keys of type str, int, bool or None, got dict key {key!r} of "
        f"type {type(key).__qualname__}. Use string keys, or wrap the value in a tuple/list."
    )
