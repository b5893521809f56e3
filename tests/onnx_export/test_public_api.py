"""The public API of ``onnx_export``: names, docstrings, annotations and a signature snapshot.

The snapshot (``api_snapshot.txt`` beside this file) lists ``name + signature`` of every
public function and class in ``onnx_export.__all__`` and of the public methods and
properties of those classes. A change to the public API fails ``test_api_snapshot``
until the snapshot is regenerated deliberately, from the repository root, with::

    python -m tests.onnx_export.test_public_api --update

That command only rewrites the snapshot file; the tests themselves never write it.
Review the diff of ``api_snapshot.txt`` and commit it with the API change.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import onnx_export

SNAPSHOT = Path(__file__).with_name("api_snapshot.txt")
UPDATE_COMMAND = "python -m tests.onnx_export.test_public_api --update"

# Dunder methods that are part of the API (``__init__`` is the class's own signature).
_PUBLIC_DUNDERS = {"__call__"}


def _public_members(cls: type) -> Iterator[tuple[str, Any]]:
    """The class's own public methods and properties, in definition order."""
    for attr, member in vars(cls).items():
        if attr.startswith("_") and attr not in _PUBLIC_DUNDERS:
            continue
        if isinstance(member, property):
            yield attr, member
        elif isinstance(member, (staticmethod, classmethod)):
            yield attr, member.__func__
        elif inspect.isfunction(member):
            yield attr, member


def _api() -> Iterator[tuple[str, Any]]:
    """``(qualified name, object)`` of each public function, class, method and property."""
    for name in onnx_export.__all__:
        obj = getattr(onnx_export, name)
        if not callable(obj):
            continue
        yield name, obj
        if inspect.isclass(obj):
            for attr, member in _public_members(obj):
                yield f"{name}.{attr}", member


def _signature_line(name: str, obj: Any) -> str:
    if isinstance(obj, property):
        return f"{name} (property){inspect.signature(obj.fget)}"  # type: ignore[arg-type]
    return f"{name}{inspect.signature(obj)}"


def render_snapshot() -> str:
    """The snapshot text for the API as it is now."""
    return "".join(f"{_signature_line(name, obj)}\n" for name, obj in _api())


def _missing_annotations(function: Callable[..., Any]) -> list[str]:
    signature = inspect.signature(function)
    missing = [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.name not in ("self", "cls")
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        and parameter.annotation is inspect.Parameter.empty
    ]
    if signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


# -- tests -----------------------------------------------------------------------------


def test_all_is_unique_and_sorted_into_existing_names() -> None:
    assert len(set(onnx_export.__all__)) == len(onnx_export.__all__)
    missing = [name for name in onnx_export.__all__ if not hasattr(onnx_export, name)]
    assert not missing, f"__all__ names that do not exist: {missing}"


@pytest.mark.parametrize(
    "name",
    [name for name in onnx_export.__all__],
)
def test_public_name_has_docstring_with_example(name: str) -> None:
    obj = getattr(onnx_export, name)
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{name} has no docstring"
    assert "Example" in doc, f"{name}'s docstring has no 'Example' section"


def _annotation_cases() -> list[Any]:
    cases = []
    for name, obj in _api():
        function = obj.fget if isinstance(obj, property) else obj
        if inspect.isclass(function):
            function = function.__init__  # the constructor's parameters
        cases.append(pytest.param(function, id=name))
    return cases


@pytest.mark.parametrize("function", _annotation_cases())
def test_public_callable_is_fully_annotated(function: Callable[..., Any]) -> None:
    missing = _missing_annotations(function)
    assert not missing, f"{function.__qualname__} lacks annotations for: {missing}"


def test_api_snapshot() -> None:
    assert SNAPSHOT.is_file(), f"{SNAPSHOT} is missing; create it with: {UPDATE_COMMAND}"
    expected = SNAPSHOT.read_text(encoding="utf-8")
    actual = render_snapshot()
    if actual != expected:
        old, new = set(expected.splitlines()), set(actual.splitlines())
        removed = "\n".join(f"  - {line}" for line in sorted(old - new))
        added = "\n".join(f"  + {line}" for line in sorted(new - old))
        pytest.fail(
            "The public API of onnx_export differs from tests/onnx_export/api_snapshot.txt.\n"
            f"Removed or changed:\n{removed or '  (none)'}\n"
            f"Added or changed:\n{added or '  (none)'}\n"
            "If the change is deliberate, regenerate the snapshot from the repository root "
            f"with `{UPDATE_COMMAND}`, review its diff and commit it.",
            pytrace=False,
        )


def test_snapshot_covers_every_public_name() -> None:
    lines = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    listed = {line.split("(", 1)[0].split(" ", 1)[0] for line in lines}
    callables = {name for name in onnx_export.__all__ if callable(getattr(onnx_export, name))}
    assert callables <= listed
    assert "ONNXProgram.save" in listed and "OnnxRegistry.register_op" in listed


def main(argv: list[str]) -> int:
    """``--update`` rewrites the snapshot; with no argument, print the current API."""
    text = render_snapshot()
    if argv == ["--update"]:
        SNAPSHOT.write_text(text, encoding="utf-8")
        print(f"wrote {SNAPSHOT} ({len(text.splitlines())} entries)")
        return 0
    if argv:
        print(f"usage: {UPDATE_COMMAND}   (no argument: print the API)", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
