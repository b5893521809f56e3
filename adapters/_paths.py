"""Human-readable paths to leaves: display paths for messages, dotted names for graphs.

A display path reads like Python that reaches the leaf: ``past_key_values[1][0]``,
``inputs['attention_mask']``, ``cfg.scale``. A dotted name is the default ONNX graph name of
the same leaf: ``past_key_values.1.0``, ``inputs.attention_mask``, ``cfg.scale``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ._treespec import DictKey, TreeSpec

__all__ = ["accessors", "child_accessors", "leaf_paths", "leaf_names", "key_names"]


def key_names(context: object, count: int) -> list[str] | None:
    """Return a custom node's context as field names if it is a list of ``count`` strings.

    ``ModelOutput`` and dataclass-like registrations use such contexts; they name children.
    A context whose first item is such a list names them too (``transformers``'
    ``DynamicCache``: ``[["key_cache", "value_cache"], layout]``).

    Example:
        >>> key_names(["logits", "loss"], 2), key_names(None, 2)
        (['logits', 'loss'], None)
        >>> key_names([["key_cache", "value_cache"], [None, None]], 2)
        ['key_cache', 'value_cache']
    """
    if (
        isinstance(context, list)
        and len(context) == count
        and all(isinstance(k, str) for k in context)
    ):
        return [str(k) for k in context]
    if isinstance(context, list) and context and isinstance(context[0], list):
        return key_names(context[0], count)
    return None


def accessors(
    kind: str,
    count: int,
    keys: Sequence[DictKey] = (),
    fields: Sequence[str] = (),
    context: str = "null",
) -> list[tuple[str, str]]:
    """Return ``(display, dotted)`` suffixes that reach each child of a node.

    Args:
        kind: The node kind.
        count: Number of children.
        keys: Dict keys (``dict``).
        fields: Field names (``namedtuple``/``dataclass``).
        context: Canonical JSON context (``custom``).

    Returns:
        One pair per child, e.g. ``("['a']", ".a")``.

    Example:
        >>> accessors("dict", 2, keys=["a", 1])
        [("['a']", '.a'), ('[1]', '.1')]
    """
    if kind == "dict":
        return [(f"[{k!r}]", f".{k}") for k in keys]
    if kind in ("namedtuple", "dataclass"):
        return [(f".{f}", f".{f}") for f in fields]
    if kind == "custom":
        names = key_names(json.loads(context), count)
        if names is not None:
            return [(f".{n}" if n.isidentifier() else f"[{n!r}]", f".{n}") for n in names]
    return [(f"[{i}]", f".{i}") for i in range(count)]


def child_accessors(spec: TreeSpec) -> list[tuple[str, str]]:
    """Return :func:`accessors` for the children of ``spec``.

    Example:
        >>> from onnx_export.adapters._treespec import LEAF
        >>> child_accessors(TreeSpec("tuple", (LEAF,)))
        [('[0]', '.0')]
    """
    return accessors(spec.kind, len(spec.children), spec.keys, spec.fields, spec.context)


def leaf_paths(spec: TreeSpec, root: str) -> list[str]:
    """Return the display path of every leaf of ``spec``, in leaf order.

    Args:
        spec: The tree spec.
        root: The name of the whole value, e.g. ``"past_key_values"``.

    Returns:
        One path per leaf (``none`` nodes have none).

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, spec = tree_flatten({"mask": 1, "kv": [(2, None)]})
        >>> leaf_paths(spec, "inputs")
        ["inputs['mask']", "inputs['kv'][0][0]"]
    """
    out: list[str] = []
    _collect(spec, root, 0, out)
    return out


def leaf_names(spec: TreeSpec, root: str) -> list[str]:
    """Return the dotted name of every leaf of ``spec``, in leaf order.

    Args:
        spec: The tree spec.
        root: The name of the whole value; ``""`` starts names at the first child.

    Returns:
        One name per leaf, e.g. ``"past_key_values.1.0"``.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, spec = tree_flatten({"a": [1, 2]})
        >>> leaf_names(spec, "x")
        ['x.a.0', 'x.a.1']
    """
    out: list[str] = []
    _collect(spec, root, 1, out)
    return [name.removeprefix(".") for name in out]


def _collect(spec: TreeSpec, path: str, style: int, out: list[str]) -> None:
    if spec.kind == "leaf":
        out.append(path)
        return
    for child, pair in zip(spec.children, child_accessors(spec), strict=True):
        _collect(child, path + pair[style], style, out)
