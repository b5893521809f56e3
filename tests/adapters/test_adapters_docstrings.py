"""Every ``Example:`` in the package runs, and every public name documents one."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import pytest

from onnx_export import adapters

MODULES = [
    "onnx_export.adapters",
    *sorted(f"onnx_export.adapters.{m.name}" for m in pkgutil.iter_modules(adapters.__path__)),
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", adapters.__all__)
def test_public_names_have_an_example(name: str) -> None:
    obj = getattr(adapters, name)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return  # constants are documented where they are defined
    assert "Example:" in (obj.__doc__ or ""), f"{name} has no Example: section"
