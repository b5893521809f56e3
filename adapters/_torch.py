"""Optional torch access: only through ``sys.modules``, never by importing torch.

:mod:`onnx_export.adapters` must run where ``import torch``
fails. When the process has already imported
torch, we may use it; these helpers return ``None`` otherwise. A module set to ``None`` in
``sys.modules`` (the usual way to block an import) counts as absent.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

__all__ = ["torch_module", "pytree_registry", "is_torch_tensor", "registry_state"]


def torch_module() -> ModuleType | None:
    """Return the ``torch`` module if the process has imported it, else ``None``.

    Example:
        >>> import sys
        >>> (torch_module() is None) == (sys.modules.get("torch") is None)
        True
    """
    return sys.modules.get("torch")


def pytree_registry() -> dict[type, Any] | None:
    """Return ``torch.utils._pytree.SUPPORTED_NODES`` if torch is imported, else ``None``.

    Example:
        >>> registry = pytree_registry()
        >>> registry is None or tuple in registry
        True
    """
    if sys.modules.get("torch") is None:
        return None
    pytree = sys.modules.get("torch.utils._pytree")
    registry = getattr(pytree, "SUPPORTED_NODES", None)
    return registry if isinstance(registry, dict) else None


def registry_state() -> int:
    """Return a number that changes when torch is imported or a pytree class is registered.

    Caches keyed by class use it to notice registrations made after they were filled.

    Example:
        >>> registry_state() >= -1
        True
    """
    pytree = sys.modules.get("torch.utils._pytree")
    if pytree is None or sys.modules.get("torch") is None:
        return -1
    return len(getattr(pytree, "SUPPORTED_NODES", ()))


def is_torch_tensor(value: object) -> bool:
    """Tell whether ``value`` is a ``torch.Tensor`` (False when torch is not imported).

    Example:
        >>> import numpy as np
        >>> is_torch_tensor(np.zeros(1))
        False
    """
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)
