"""The examples in ``onnx_export.hf``'s docstrings run (those not marked ``+SKIP``)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "onnx_export.hf",
    "onnx_export.hf._errors",
    "onnx_export.hf._safetensors",
    "onnx_export.hf.export._export",
    "onnx_export.hf.runtime.generation._causal",
    "onnx_export.hf.runtime.generation._seq2seq",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
