"""When a model's weights and the example inputs live on devices that cannot meet.

A model built on the ``meta`` device (weights without data) exports like a fake one, with
example inputs that hold no data either. torch.export meets a real input that reaches a
meta weight with a ``FakeTensorDeviceMismatchError`` that names neither the input nor the
fix; :func:`explain_device_mismatch` says both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnx_export._fake import has_no_data
from onnx_export.errors import CaptureError, ExportInputError

__all__ = ["explain_device_mismatch", "mismatch_message"]


@contextlib.contextmanager
def explain_device_mismatch(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[None]:
    """Turn a capture failure of a meta model with real inputs into a specific error.

    A meta model may take some real inputs (integer ids index meta embeddings fine); only
    when capture fails with a device mismatch is the cause named.

    Raises:
        ExportInputError: Naming a meta weight, the first real input and the fixes.
    """
    try:
        yield
    except CaptureError as error:
        if not _device_mismatch(error):
            raise
        message = mismatch_message(module, args, kwargs)
        if message is None:
            raise
        raise ExportInputError(message) from error


def _device_mismatch(error: BaseException) -> bool:
    text = str(error)
    return "meta" in text and ("DeviceMismatch" in text or "two devices" in text)


def mismatch_message(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """The message for a meta-weight model with a real input, or ``None`` if it has none."""
    meta = next((name for name, t in _weights(module) if t.is_meta), None)
    if meta is None:
        return None
    leaves, _ = pytree.tree_flatten_with_path((args, kwargs))
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor) and not has_no_data(leaf):
            return (
                f"The model's weights are on the meta device (e.g. {meta!r}), but the example "
                f"input {_display(path)} is a real {leaf.device.type} tensor of shape "
                f"{tuple(leaf.shape)}, and torch.export cannot mix them. A meta model exports "
                "with inputs that hold no data either: create them on the meta device (e.g. "
                "torch.randn(..., device='meta'), or inside `with torch.device('meta'):`), or "
                "build the model and the inputs inside `with onnx_export.enable_fake_mode():`."
                " Then attach the weights with program.save(path, model_state=...)."
            )
    return None


def _weights(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _display(path: tuple[Any, ...]) -> str:
    """``args[0]`` / ``kwargs['mask']`` from a pytree key path of ``(args, kwargs)``."""
    text = pytree.keystr(path)
    if text.startswith("[0]"):
        return "args" + text[3:]
    if text.startswith("[1]"):
        return "kwargs" + text[3:]
    return text
