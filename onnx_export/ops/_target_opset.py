"""The opset the model being translated is for, for functions that differ by opset.

Translation records at opset 18 (torchlib's) and the model is converted to the target
opset afterwards; a function that has a better ONNX op in a newer opset (``Attention``,
``RMSNormalization`` at 23) asks :func:`target_opset` and emits it with that op's own
version, which the version converter keeps.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["target_opset", "targeting"]

_TARGET = contextvars.ContextVar("onnx_export_target_opset", default=18)


def target_opset() -> int:
    """The ONNX opset of the model being translated (18 outside a translation)."""
    return _TARGET.get()


@contextlib.contextmanager
def targeting(opset: int) -> Iterator[None]:
    """Translate for ``opset`` within the block."""
    token = _TARGET.set(opset)
    try:
        yield
    finally:
        _TARGET.reset(token)
