"""Where the captured program's output structure differs from the model's eager output.

The ONNX file returns the captured structure (its adapter rebuilds it); a check of the
numbers alone passes when eager returns other fields, other keys or keys in another order
with the same tensors. The parity check reports the first difference found here.
"""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

__all__ = ["structure_difference"]


def _name(spec: pytree.TreeSpec) -> str:
    return "a leaf" if spec.is_leaf() else getattr(spec.type, "__name__", str(spec.type))


def _difference(path: str, eager: pytree.TreeSpec, captured: pytree.TreeSpec) -> str:
    if eager.is_leaf() or captured.is_leaf() or eager.type is not captured.type:
        if eager.is_leaf() and captured.is_leaf():
            return ""
        return f"{path}: eager returns {_name(eager)}, the export {_name(captured)}"
    if eager.context != captured.context:
        return f"{path}: eager's {eager.context!r}, the export's {captured.context!r}"
    if eager.num_children != captured.num_children:
        return (
            f"{path}: eager returns {eager.num_children} items, the export {captured.num_children}"
        )
    keys = eager.context if isinstance(eager.context, list) else None
    for index, (a, b) in enumerate(zip(eager.children(), captured.children(), strict=True)):
        key = keys[index] if keys is not None and len(keys) == eager.num_children else index
        found = _difference(f"{path}.{key}", a, b)
        if found:
            return found
    return ""


def structure_difference(eager: Any, captured: pytree.TreeSpec | None) -> str:
    """The first place where ``eager``'s structure differs from ``captured``, or ``""``.

    Example:
        >>> import torch
        >>> spec = pytree.tree_structure({"a": 1, "b": 2})
        >>> structure_difference({"b": torch.ones(1), "a": torch.ones(1)}, spec)
        "output: eager's ['b', 'a'], the export's ['a', 'b']"
        >>> structure_difference({"a": torch.ones(1), "b": None}, spec)
        ''
    """
    if captured is None:
        return ""
    return _difference("output", pytree.tree_structure(eager), captured)
