"""``module.to(...)`` inside ``forward`` that changes nothing, kept a no-op while capturing.

Some models cast a submodule in their ``forward`` (NLLB-MoE's router:
``self.classifier = self.classifier.to(self.dtype)``, with ``router_dtype`` usually the
weights' own dtype). Eagerly that returns the module unchanged; while torch.export traces,
the parameters are fake tensors and ``Module._apply`` tries to swap them
("_apply(): Couldn't swap Linear.weight"), so the capture failed. While
:func:`unchanged_module_casts` is active, a ``Module.to`` whose every parameter and buffer
already has the asked dtype (floating and complex ones: the only ones ``to`` converts) and
device returns the module as eager does, without ``_apply``; any real conversion runs as
before.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "unchanged_module_casts"]


def _unchanged(module: torch.nn.Module, device: Any, dtype: Any) -> bool:
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if device is not None and tensor.device != torch.device(device):
            return False
        converts = tensor.is_floating_point() or tensor.is_complex()
        if dtype is not None and converts and tensor.dtype != dtype:
            return False
    return True


@contextlib.contextmanager
def unchanged_module_casts() -> Iterator[None]:
    """``Module.to`` calls that convert nothing return the module, without ``_apply``.

    Example:
        >>> layer = torch.nn.Linear(2, 2)
        >>> with unchanged_module_casts():
        ...     layer.to(torch.float32) is layer
        True
    """
    original = torch.nn.Module.to

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        try:
            device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        except Exception:  # torch's own call gives the user's error
            return original(self, *args, **kwargs)
        if memory_format is None and _unchanged(self, device, dtype):
            return self
        return original(self, *args, **kwargs)

    with swapped((torch.nn.Module, "to", to)):  # patched while capturing
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="module_casts",
    targets=(
        Target("torch", "nn.Module.to"),
        Target("torch._C", "_nn._parse_to"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why='module.to(dtype) in forward swaps fake parameters ("Couldn\'t swap Linear.weight")',
    apply=lambda call: unchanged_module_casts(),
)
