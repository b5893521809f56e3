"""The public surface: every exported name is documented with an example and fully typed."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import types
from collections.abc import Callable, Iterator

import pytest

from onnx_export import diagnostics


def public_names() -> list[str]:
    return list(diagnostics.__all__)


def attribute_docstring(module: types.ModuleType, name: str) -> str | None:
    """The string literal that follows ``name = ...`` in the module's source."""
    tree = ast.parse(inspect.getsource(module))
    for node, following in itertools.pairwise(tree.body):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        assigned = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        documented = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
        if assigned and documented:
            return str(following.value.value)
    return None


def documentation(name: str) -> str | None:
    obj = getattr(diagnostics, name)
    if isinstance(obj, types.ModuleType) or inspect.isclass(obj) or inspect.isroutine(obj):
        return inspect.getdoc(obj)
    for module_name in ("onnx_export.diagnostics", "onnx_export.diagnostics.rules"):
        doc = attribute_docstring(importlib.import_module(module_name), name)
        if doc:
            return doc
    return None


def public_routines(obj: object) -> Iterator[tuple[str, Callable[..., object]]]:
    if inspect.isroutine(obj):
        yield getattr(obj, "__name__", "?"), obj
        return
    if not inspect.isclass(obj):
        return
    for attribute, value in vars(obj).items():
        if attribute.startswith("_") and attribute != "__init__":
            continue
        if isinstance(value, property) and value.fget is not None:
            yield f"{obj.__name__}.{attribute}", value.fget
        elif isinstance(value, classmethod | staticmethod):
            yield f"{obj.__name__}.{attribute}", value.__func__
        elif inspect.isfunction(value):
            yield f"{obj.__name__}.{attribute}", value


def test_all_is_complete_and_unique() -> None:
    assert len(set(diagnostics.__all__)) == len(diagnostics.__all__)
    for name in diagnostics.__all__:
        assert hasattr(diagnostics, name), name


def test_the_exporter_facing_names_are_public() -> None:
    expected = {
        "Level",
        "Rule",
        "Location",
        "Stack",
        "Diagnostic",
        "ExceptionInfo",
        "DiagnosticOptions",
        "DiagnosticContext",
        "summarize",
        "load_sarif",
        "main",
        "locations_from_stack_trace",
        "location_from_frame",
        "rules",
        "ALL_RULES",
        "get_rule",
    }
    assert expected <= set(diagnostics.__all__)


@pytest.mark.parametrize("name", public_names())
def test_public_name_has_a_docstring_with_an_example(name: str) -> None:
    doc = documentation(name)
    assert doc, f"diagnostics.{name} has no docstring"
    assert "Example" in doc, f"diagnostics.{name}'s docstring has no Example section"


@pytest.mark.parametrize("name", public_names())
def test_public_callables_are_fully_annotated(name: str) -> None:
    for qualified, routine in public_routines(getattr(diagnostics, name)):
        signature = inspect.signature(routine)
        for parameter in signature.parameters.values():
            if parameter.name in {"self", "cls"}:
                continue
            assert parameter.annotation is not inspect.Parameter.empty, (
                f"{qualified}: parameter {parameter.name!r} has no annotation"
            )
        assert signature.return_annotation is not inspect.Signature.empty, (
            f"{qualified} has no return annotation"
        )


@pytest.mark.parametrize("name", public_names())
def test_public_methods_have_examples(name: str) -> None:
    for qualified, routine in public_routines(getattr(diagnostics, name)):
        if qualified.endswith("__init__"):
            continue
        doc = inspect.getdoc(routine) or ""
        assert "Example" in doc, f"{qualified} has no Example section"
