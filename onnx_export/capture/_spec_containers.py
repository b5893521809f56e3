"""The containers of an input, as ``dynamic_shapes`` may spell them and as torch.export takes them.

An input may be any container torch's pytree flattens: tuples, lists, dicts, namedtuples,
dataclasses and other registered classes, nested. A user spells the spec of such an input
the way that reads naturally: the class itself (``Pair({0: "b"}, {0: "b"})``,
``Batch(ids={0: "b"}, mask=None)``), a tuple or list in field order, or a dict keyed by
field name. torch.export takes exactly one form per container: the namedtuple class for a
namedtuple, a list of the flattened children for a registered class (a dataclass
included), the container itself for the builtins. :func:`child_specs` reads every
spelling; :func:`torch_form` writes torch's; :func:`named_form` writes the form the rest of
the exporter reads, where namedtuple and dataclass fields go by name (``pair.left``), as the
ONNX graph names them.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

__all__ = [
    "Node",
    "container",
    "child_specs",
    "torch_form",
    "named_form",
    "describe",
    "key_text",
    "leaf_sources",
]


def key_text(key: object) -> str:
    """A pytree key's text: a dict key, a sequence index or an attribute name."""
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


@dataclasses.dataclass(frozen=True)
class Node:
    """One container of an input, as torch's pytree flattens it.

    Attributes:
        kind: ``"dict"``, ``"list"``, ``"tuple"``, ``"namedtuple"``, ``"dataclass"`` or
            ``"custom"`` (another class registered with torch's pytree).
        keys: Each child's key: the dict key, the index, or the field name.
        texts: Each child's key as text (``"left"``, ``"0"``).
        children: The children, in torch's order.
        cls: The container's class.
        accessors: For a registered class, each child as torch's messages name it
            (``['key_cache']`` for a ``DynamicCache``, ``.left``, ``[0]``); empty when
            torch names them by position.
    """

    kind: str
    keys: tuple[Any, ...]
    texts: tuple[str, ...]
    children: tuple[Any, ...]
    cls: type
    accessors: tuple[str, ...] = ()

    @property
    def named(self) -> bool:
        """Whether children go by field name (namedtuples and dataclasses)."""
        return self.kind in ("namedtuple", "dataclass")


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple)


def container(value: Any) -> Node | None:
    """``value`` as a :class:`Node`, or ``None`` for a leaf (a tensor, a scalar, ``None``)."""
    if value is None or isinstance(value, (torch.Tensor, int, float, bool, str)):
        return None
    cls = type(value)
    if isinstance(value, dict) and cls in (dict, collections.OrderedDict, collections.defaultdict):
        keys = tuple(value)
        return Node("dict", keys, tuple(map(str, keys)), tuple(value.values()), cls)
    if _is_namedtuple(value):
        fields = tuple(cls._fields)
        return Node("namedtuple", fields, fields, tuple(value), cls)
    if cls in (list, tuple, collections.deque):
        count = len(value)
        kind = "tuple" if cls is tuple else "list"
        return Node(kind, tuple(range(count)), tuple(map(str, range(count))), tuple(value), cls)
    handler = pytree.SUPPORTED_NODES.get(pytree._get_node_type(value))  # torch's node lookup
    if handler is None:
        return None
    accessors: tuple[str, ...] = ()
    if handler.flatten_with_keys_fn is not None:
        pairs, _ = handler.flatten_with_keys_fn(value)
        texts = tuple(key_text(k) for k, _ in pairs)
        children = tuple(c for _, c in pairs)
        accessors = tuple(str(k) for k, _ in pairs)  # pytree's keys print as torch names them
    else:
        flat, _ = handler.flatten_fn(value)
        children, texts = tuple(flat), tuple(map(str, range(len(flat))))
    kind = "dataclass" if dataclasses.is_dataclass(value) else "custom"
    return Node(kind, texts, texts, children, cls, accessors)


def describe(node: Node) -> str:
    """``Pair(left, right)``, ``a dict with keys ['a']``, ``a list of 2``: for messages."""
    if node.named or node.kind == "custom":
        return f"{node.cls.__name__}({', '.join(node.texts)})"
    if node.kind == "dict":
        return f"a dict with keys {list(node.keys)}"
    return f"a {node.kind} of {len(node.children)}"


def _forms(node: Node) -> str:
    name = node.cls.__name__
    if node.named:
        fields = ", ".join(f"{t}=..." for t in node.texts)
        return (
            f"{name}({fields}), a dict {{field: spec}} or a list in field order "
            f"({', '.join(node.texts)}), or dotted names ('<input>.{node.texts[0]}')"
            if node.texts
            else f"{name}() or None"
        )
    if node.kind == "custom":
        return f"a list with one spec per child ({', '.join(node.texts)}), or a dict by key"
    if node.kind == "dict":
        return "a dict with the input's keys"
    return f"a {node.kind} with one entry per element"


def _from_instance(where: str, spec: Any, node: Node) -> list[Any]:
    """The child specs of a spec written as the input's own class (``Batch(ids=..., ...)``)."""
    if node.kind == "namedtuple":
        return list(spec)
    if node.kind == "dataclass":
        return [getattr(spec, t, None) for t in node.texts]
    inner = container(spec)
    if inner is None or len(inner.children) != len(node.children):
        raise ValueError(
            f"dynamic_shapes[{where!r}] is a {node.cls.__name__} whose children do not match "
            f"the input's ({', '.join(node.texts)}); give {_forms(node)}."
        )
    return list(inner.children)


def _from_mapping(where: str, spec: Mapping[Any, Any], node: Node) -> list[Any]:
    lookup = {t: k for k, t in zip(node.keys, node.texts, strict=True)}
    unknown = [k for k in spec if k not in node.keys and str(k) not in lookup]
    if unknown:
        what = "keys" if node.kind == "dict" else "fields"
        raise ValueError(
            f"dynamic_shapes[{where!r}] has keys {unknown} that the input does not have; "
            f"the input is {describe(node)}, its {what} are {list(node.texts)}."
        )
    return [spec.get(k, spec.get(t)) for k, t in zip(node.keys, node.texts, strict=True)]


def child_specs(where: str, spec: Any, node: Node) -> list[Any]:
    """The spec of each child of ``node``, from any spelling of the container's spec.

    Raises:
        ValueError: A spec that is none of the forms, has keys the input lacks, or has
            another number of entries; the message lists the forms the input takes.
    """
    if type(spec) is node.cls and node.kind in ("namedtuple", "dataclass", "custom"):
        return _from_instance(where, spec, node)
    if isinstance(spec, Mapping) and node.kind not in ("list", "tuple"):
        return _from_mapping(where, spec, node)
    if isinstance(spec, (list, tuple)) and node.kind != "dict":
        if len(spec) != len(node.children):
            raise ValueError(
                f"dynamic_shapes[{where!r}] has {len(spec)} entries for an input with "
                f"{len(node.children)} elements ({describe(node)}); give one per element "
                f"(None for static ones), or name leaves by path ('{where}.{node.texts[0]}')."
                if node.texts
                else f"dynamic_shapes[{where!r}] has {len(spec)} entries for an empty input."
            )
        return list(spec)
    raise ValueError(
        f"dynamic_shapes[{where!r}] is {spec!r}, but that input is {describe(node)}: give "
        f"{_forms(node)}."
    )


def torch_form(node: Node, specs: Sequence[Any], given: Any) -> Any:
    """The container of ``specs`` that torch.export matches with the input.

    ``given`` is the user's spec of the container: a list or tuple for a list or tuple
    input keeps its own type (torch takes either).
    """
    if node.kind == "dict":
        return dict(zip(node.keys, specs, strict=True))
    if node.kind == "namedtuple":
        return node.cls(*specs)
    if node.kind in ("list", "tuple"):
        kind = type(given) if type(given) in (list, tuple) else node.cls
        return list(specs) if kind is collections.deque else kind(specs)
    return list(specs)  # a registered class: torch matches its flattened children


def named_form(spec: Any, value: Any) -> Any:
    """``spec`` (torch's form) with namedtuple and dataclass fields keyed by name.

    The exporter names a nested leaf by its dotted path (``pair.left``, ``batch.ids``), as
    the ONNX graph does; this form lets it find the leaf's spec by that path.
    """
    node = container(value)
    if node is None or spec is None or not isinstance(spec, (list, tuple, dict)):
        return spec
    if node.kind == "dict" and isinstance(spec, dict):
        pairs = zip(node.keys, node.children, strict=True)
        return {k: named_form(spec.get(k), v) for k, v in pairs}
    if len(spec) != len(node.children):
        return spec
    children = [named_form(s, v) for s, v in zip(spec, node.children, strict=True)]
    if node.named:
        return dict(zip(node.texts, children, strict=True))
    return type(spec)(children) if type(spec) in (list, tuple) else children


def _steps(node: Node) -> list[tuple[str, str, str]]:
    """``(torch's accessor, the spec's accessor, dotted step)`` for each child of ``node``.

    torch.export names a namedtuple's or a dataclass's field as an attribute
    (``L['pair'].left``), and a registered class's children by its keys
    (``L['cache']['key_cache'][0]``); the spec holds them by position (``[0]``).
    """
    if node.kind == "dict":
        return [(f"[{k!r}]", f"[{k!r}]", t) for k, t in zip(node.keys, node.texts, strict=True)]
    if node.named:
        return [(f".{t}", f"[{i}]", t) for i, t in enumerate(node.texts)]
    if node.kind == "custom" and len(node.accessors) == len(node.texts):
        pairs = enumerate(zip(node.accessors, node.texts, strict=True))
        return [(a, f"[{i}]", t) for i, (a, t) in pairs]
    return [(f"[{i}]", f"[{i}]", t) for i, t in enumerate(node.texts)]


def leaf_sources(root: str, value: Any, spec_root: str | None = None) -> list[tuple[str, str, str]]:
    """``(torch's source, the spec's source, dotted path)`` of each leaf of one input.

    Example:
        >>> from typing import NamedTuple
        >>> class Pair(NamedTuple):
        ...     left: int
        ...     right: int
        >>> leaf_sources("pair", Pair(1, 2))[0]
        ("L['pair'].left", "L['pair'][0]", 'pair.left')
    """
    out: list[tuple[str, str, str]] = []
    start = f"L[{(spec_root or root)!r}]"
    _collect(value, f"L[{root!r}]", start, root, out)
    return out


def _collect(value: Any, torch_path: str, spec_path: str, dotted: str, out: list[Any]) -> None:
    node = container(value)
    if node is None:
        out.append((torch_path, spec_path, dotted))
        return
    for (theirs, ours, step), child in zip(_steps(node), node.children, strict=True):
        _collect(child, torch_path + theirs, spec_path + ours, f"{dotted}.{step}", out)
