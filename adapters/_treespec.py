"""``TreeSpec``: the structure of a nested Python value, in our own JSON format.

The format is independent of ``torch.utils._pytree``'s serialisation so that it can be read
without torch and so that it never names a function to call. Node kinds:

========== ======================================================================
kind       meaning
========== ======================================================================
leaf       one leaf (a tensor, an array, an int/float/bool/str)
none       ``None``; it holds no leaf
tuple      a tuple; ``children`` in order
list       a list (also ``collections.deque``)
dict       a dict (also ``OrderedDict``/``defaultdict``); ``keys`` are str/int/bool/None
namedtuple a namedtuple; ``type_name`` and ``fields``
dataclass  a dataclass instance; ``type_name`` and ``fields`` (fields with ``init=True``)
custom     a class registered with torch's pytree; ``type_name`` and JSON ``context``
========== ======================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, cast, get_args

from ._errors import AdapterSpecError
from ._json import (
    JsonValue,
    canonical_json,
    read_list,
    read_object,
    read_str,
    spec_error,
)

__all__ = ["NodeKind", "DictKey", "TreeSpec", "LEAF", "NONE"]

NodeKind: TypeAlias = Literal[
    "leaf", "none", "tuple", "list", "dict", "namedtuple", "dataclass", "custom"
]
"""The kinds of :class:`TreeSpec` nodes."""

DictKey: TypeAlias = str | int | bool | None
"""Dict keys a spec can record; they keep their JSON type (``1`` and ``"1"`` differ)."""

_KINDS: tuple[str, ...] = get_args(NodeKind)
_CONTAINERS = frozenset({"tuple", "list", "dict", "namedtuple", "dataclass", "custom"})
_NAMED = frozenset({"namedtuple", "dataclass", "custom"})
_MAX_DEPTH = 200


@dataclass(frozen=True)
class TreeSpec:
    """The structure of a nested value; leaves are counted, not stored.

    Attributes:
        kind: The node kind, see the module docstring.
        children: Child specs, in flattening order (empty for ``leaf`` and ``none``).
        keys: Dict keys, one per child (``dict`` only).
        type_name: ``module.qualname`` of the class (``namedtuple``, ``dataclass``, ``custom``).
        fields: Field names, one per child (``namedtuple``, ``dataclass``).
        context: Canonical JSON text of the pytree context (``custom`` only; else ``"null"``).
        num_leaves: Number of leaves below this node (``none`` counts zero).

    Example:
        >>> spec = TreeSpec("dict", (LEAF, NONE), keys=("a", "b"))
        >>> spec.num_leaves
        1
        >>> TreeSpec.from_json_obj(spec.to_json_obj()) == spec
        True
    """

    kind: NodeKind
    children: tuple[TreeSpec, ...] = ()
    keys: tuple[DictKey, ...] = ()
    type_name: str = ""
    fields: tuple[str, ...] = ()
    context: str = "null"
    num_leaves: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = _structural_problem(self)
        if problem:
            raise AdapterSpecError(f"invalid TreeSpec({self.kind!r}): {problem}")
        count = 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)
        object.__setattr__(self, "num_leaves", count)

    def __repr__(self) -> str:
        return f"TreeSpec({_compact(self)})"

    @property
    def context_value(self) -> JsonValue:
        """The ``context`` parsed back into JSON data.

        Example:
            >>> TreeSpec("custom", (LEAF,), type_name="m.C", context='["a"]').context_value
            ['a']
        """
        return cast(JsonValue, json.loads(self.context))

    def to_json_obj(self) -> dict[str, object]:
        """Convert to JSON data (a dict), the inverse of :meth:`from_json_obj`.

        Returns:
            A dict with ``kind`` and, depending on it, ``children``, ``keys``, ``type``,
            ``fields`` and ``context``.

        Example:
            >>> TreeSpec("tuple", (LEAF, NONE)).to_json_obj()
            {'kind': 'tuple', 'children': [{'kind': 'leaf'}, {'kind': 'none'}]}
        """
        obj: dict[str, object] = {"kind": self.kind}
        if self.kind in _NAMED:
            obj["type"] = self.type_name
        if self.kind == "dict":
            obj["keys"] = list(self.keys)
        if self.kind in ("namedtuple", "dataclass"):
            obj["fields"] = list(self.fields)
        if self.kind == "custom":
            obj["context"] = self.context_value
        if self.kind in _CONTAINERS:
            obj["children"] = [c.to_json_obj() for c in self.children]
        return obj

    @classmethod
    def from_json_obj(cls, obj: object, where: str = "tree") -> TreeSpec:
        """Read and validate JSON data written by :meth:`to_json_obj`.

        Args:
            obj: Parsed JSON.
            where: Field path of ``obj`` for error messages.

        Returns:
            The spec.

        Raises:
            AdapterSpecError: Naming the first bad field, e.g. ``tree.children[1].keys``.

        Example:
            >>> TreeSpec.from_json_obj({"kind": "list", "children": [{"kind": "leaf"}]})
            TreeSpec([*])
        """
        return _from_json(obj, where, 0)


def _compact(spec: TreeSpec) -> str:
    """Python-like one-line form: ``*`` is a leaf, e.g. ``{'a': (*, None)}``."""
    if spec.kind in ("leaf", "none"):
        return "*" if spec.kind == "leaf" else "None"
    kids = [_compact(c) for c in spec.children]
    if spec.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(spec.keys, kids, strict=True)) + "}"
    if spec.kind in ("namedtuple", "dataclass"):
        kids = [f"{f}={v}" for f, v in zip(spec.fields, kids, strict=True)]
    body = ", ".join(kids)
    if spec.kind == "tuple":
        return f"({body},)" if len(kids) == 1 else f"({body})"
    if spec.kind == "list":
        return f"[{body}]"
    short = spec.type_name.rsplit(".", 1)[-1]
    return f"{short}<{spec.context}>({body})" if spec.kind == "custom" else f"{short}({body})"


def _structural_problem(spec: TreeSpec) -> str:
    """Return what is wrong with one node's own fields, or ``""``."""
    kind, count = spec.kind, len(spec.children)
    checks = (
        (kind not in _KINDS, f"kind must be one of {', '.join(_KINDS)}"),
        (not all(isinstance(c, TreeSpec) for c in spec.children), "children must be TreeSpecs"),
        (kind not in _CONTAINERS and count > 0, "leaf and none nodes have no children"),
        (kind == "dict" and len(spec.keys) != count, f"{len(spec.keys)} keys, {count} children"),
        (
            not all(k is None or type(k) in (str, int, bool) for k in spec.keys),
            f"dict keys must be str, int, bool or None, got {list(spec.keys)}",
        ),
        (
            len(set(map(_key_identity, spec.keys))) != len(spec.keys),
            f"duplicate dict keys {list(spec.keys)}",
        ),
        (kind != "dict" and len(spec.keys) > 0, "only dict nodes have keys"),
        (
            kind in ("namedtuple", "dataclass") and len(spec.fields) != count,
            f"{len(spec.fields)} fields for {count} children",
        ),
        (not all(isinstance(f, str) and f for f in spec.fields), "fields must be names"),
        (
            kind not in ("namedtuple", "dataclass") and len(spec.fields) > 0,
            "only namedtuple and dataclass nodes have fields",
        ),
        (kind in _NAMED and not spec.type_name, "a type_name is required"),
        (kind != "custom" and spec.context != "null", "only custom nodes have a context"),
    )
    return next((problem for failed, problem in checks if failed), "")


def _key_identity(key: object) -> tuple[str, str]:
    """Distinguish keys by JSON type, so ``1`` and ``True`` count as different keys."""
    return (type(key).__name__, repr(key))


def _read_key(obj: object, where: str) -> DictKey:
    if obj is None or type(obj) in (str, int, bool):
        return cast(DictKey, obj)
    raise spec_error(where, "a dict key: string, integer, boolean or null", obj)


def _from_json(obj: object, where: str, depth: int) -> TreeSpec:
    if depth > _MAX_DEPTH:
        raise spec_error(where, f"a tree at most {_MAX_DEPTH} levels deep", "a deeper tree")
    if not isinstance(obj, dict):
        raise spec_error(where, "a JSON object", obj)
    kind = cast(NodeKind, read_str(obj.get("kind"), f"{where}.kind", choices=_KINDS))
    data = read_object(obj, where, _JSON_FIELDS[kind])
    children = tuple(
        _from_json(c, f"{where}.children[{i}]", depth + 1)
        for i, c in enumerate(read_list(data.get("children", []), f"{where}.children"))
    )
    keys = tuple(
        _read_key(k, f"{where}.keys[{i}]")
        for i, k in enumerate(read_list(data.get("keys", []), f"{where}.keys"))
    )
    fields = tuple(
        read_str(f, f"{where}.fields[{i}]")
        for i, f in enumerate(read_list(data.get("fields", []), f"{where}.fields"))
    )
    type_name = read_str(data["type"], f"{where}.type") if "type" in data else ""
    context = "null"
    if kind == "custom":
        try:
            context = canonical_json(cast(JsonValue, data["context"]))
        except (TypeError, ValueError) as e:
            raise spec_error(f"{where}.context", "JSON data", data["context"]) from e
    try:
        return TreeSpec(kind, children, keys, type_name, fields, context)
    except AdapterSpecError as e:
        raise spec_error(where, "a consistent node", str(e)) from None


_JSON_FIELDS: dict[str, tuple[str, ...]] = {
    "leaf": ("kind",),
    "none": ("kind",),
    "tuple": ("kind", "children"),
    "list": ("kind", "children"),
    "dict": ("kind", "keys", "children"),
    "namedtuple": ("kind", "type", "fields", "children"),
    "dataclass": ("kind", "type", "fields", "children"),
    "custom": ("kind", "type", "context", "children"),
}

LEAF = TreeSpec("leaf")
"""The spec of a single leaf."""

NONE = TreeSpec("none")
"""The spec of ``None``."""
