"""The opset the model being translated is for, for functions that differ by opset.

Translation records at opset 18 (torchlib's) and the model is converted to the target
opset afterwards; a function that has a better ONNX op in a newer opset (``Attention``,
``RMSNormalization`` at 23) asks :func:`target_opset` and emits it with that op's own
version, which the version converter keeps.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import onnx_ir as ir

from onnx_export.ops._common import builder

__all__ = ["target_opset", "target_runtime", "targeting", "versioned_node"]

_TARGET = contextvars.ContextVar("onnx_export_target_opset", default=18)
_RUNTIME = contextvars.ContextVar("onnx_export_target_runtime", default="onnx")


def target_opset() -> int:
    """The ONNX opset of the model being translated (18 outside a translation)."""
    return _TARGET.get()


def target_runtime() -> str:
    """``ExportOptions.target`` of the model being translated (``"onnx"`` outside one).

    ``"onnxruntime"``: ONNX Runtime's fusions rewrite the graph afterwards, so a function
    keeps the node pattern they match.
    """
    return _RUNTIME.get()


@contextlib.contextmanager
def targeting(opset: int, runtime: str = "onnx") -> Iterator[None]:
    """Translate for ``opset`` (and ``ExportOptions.target`` ``runtime``) within the block."""
    token, runtime_token = _TARGET.set(opset), _RUNTIME.set(runtime)
    try:
        yield
    finally:
        _RUNTIME.reset(runtime_token)
        _TARGET.reset(token)


def versioned_node(
    op_type: str, inputs: Sequence[Any], attributes: dict[str, Any], version: int
) -> ir.Value:
    """One node of ``op_type`` at its own opset ``version`` (the converter keeps it)."""
    result = builder().call_op(op_type, list(inputs), attributes, version=version)
    assert isinstance(result, ir.Value)
    return result
