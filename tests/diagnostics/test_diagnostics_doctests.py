"""The examples in docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

from onnx_export import diagnostics

MODULE_NAMES = sorted(
    {"onnx_export.diagnostics"}
    | {
        info.name
        for info in pkgutil.walk_packages(diagnostics.__path__, "onnx_export.diagnostics.")
    }
)


@pytest.mark.parametrize("module_name", MODULE_NAMES)
def test_docstring_examples(module_name: str) -> None:
    module = importlib.import_module(module_name)
    results = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert results.failed == 0, f"{results.failed} doctest example(s) failed in {module_name}"
