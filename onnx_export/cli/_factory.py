"""``MODULE:FACTORY`` on the command line: import the factory, call it, check its result.

``MODULE`` is a dotted module name (imported from the current folder or ``sys.path``) or a
path to a ``.py`` file; ``FACTORY`` names a callable in it (dotted for attributes, e.g.
``Models.tiny``) that takes no arguments and returns ``(model, args)`` or
``(model, args, kwargs)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import pathlib
import re
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from onnx_export.cli._common import UsageError

__all__ = ["ModelCall", "call_factory", "load_registry", "parse_dynamic"]

_EXAMPLE = "e.g. my_models:make_model or path/to/models.py:make_model"
_DYNAMIC = re.compile(r"^([A-Za-z_][\w.]*):(-?\d+)=([A-Za-z_]\w*)$")  # NAME may be a dotted path


@dataclasses.dataclass(frozen=True)
class ModelCall:
    """What a factory returned: the model and the example inputs to call it with."""

    model: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


def _required_parameters(factory: Any) -> list[str]:
    """The parameters ``factory()`` leaves without a value (none when it cannot tell)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    kinds = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    return [
        p.name
        for p in signature.parameters.values()
        if p.kind in kinds and p.default is inspect.Parameter.empty
    ]


def call_factory(reference: str) -> ModelCall:
    """Import ``MODULE:FACTORY``, call the factory and check what it returned."""
    factory = _resolve(reference)
    required = _required_parameters(factory)
    if required:
        raise UsageError(
            f"{reference} takes the arguments {required}, but a factory is called with none: "
            f"give them defaults, or write a function without parameters that calls it "
            f"(def make(): return {reference.rpartition(':')[2]}(...))."
        )
    try:
        result = factory()
    except Exception as e:
        raise UsageError(f"{reference}() raised {_describe(e)}") from e
    return _check_result(reference, result)


def load_registry(reference: str) -> Any:
    """The ``OnnxRegistry`` that ``MODULE:NAME`` is, or that calling it returns (``--registry``).

    ``NAME`` is an ``OnnxRegistry`` object or a function of no arguments that returns one
    (after calling ``register_op`` for each custom op).
    """
    from onnx_export._registry import OnnxRegistry

    example = "e.g. my_ops.py:make_registry, a function that returns an OnnxRegistry"
    try:
        value = _attribute(reference, example, "an OnnxRegistry or a function that returns one")
    except UsageError as e:  # the module's messages speak of factories: name the option
        text = str(e).replace(_EXAMPLE, example).replace("MODULE:FACTORY", "MODULE:NAME")
        raise UsageError(f"--registry {reference}: {text}") from e
    if not isinstance(value, OnnxRegistry) and callable(value):
        try:
            value = value()
        except Exception as e:
            raise UsageError(f"--registry {reference}: {reference}() raised {_describe(e)}") from e
    if not isinstance(value, OnnxRegistry):
        raise UsageError(
            f"--registry {reference}: expected an onnx_export.OnnxRegistry (or a function that "
            f"returns one, after register_op for each custom op), got {_kind(value)}."
        )
    return value


def parse_dynamic(values: Sequence[str]) -> dict[str, dict[int, str]]:
    """``["x:0=batch", "x:1=seq"]`` -> ``{"x": {0: "batch", 1: "seq"}}``."""
    shapes: dict[str, dict[int, str]] = {}
    for value in values:
        match = _DYNAMIC.match(value)
        if match is None:
            raise UsageError(
                f"--dynamic {value!r}: expected NAME:AXIS=DIM, e.g. input_ids:0=batch (an "
                "input of forward, an axis number, a dimension name)."
            )
        name, axis, dim = match.group(1), int(match.group(2)), match.group(3)
        axes = shapes.setdefault(name, {})
        if axis in axes and axes[axis] != dim:
            raise UsageError(f"--dynamic: axis {axis} of {name!r} is named twice.")
        axes[axis] = dim
    return shapes


def _resolve(reference: str) -> Callable[[], Any]:
    value = _attribute(
        reference, _EXAMPLE, "a function in it that returns (model, args) or (model, args, kwargs)"
    )
    if not callable(value):
        raise UsageError(f"{reference} is a {type(value).__name__}, not a callable factory.")
    return value  # type: ignore[no-any-return]  # checked callable just above


def _attribute(reference: str, example: str, wanted: str) -> Any:
    """The object ``MODULE:NAME`` names (``NAME`` dotted for attributes)."""
    module_part, sep, attribute = reference.rpartition(":")
    if not sep or not module_part or not attribute:
        raise UsageError(f"expected MODULE:FACTORY ({example}), got {reference!r}.")
    module = _import(module_part)
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{module_part!r} has no attribute {attribute!r}; name {wanted}.")
        value = getattr(value, part)
    return value


def _import(module_part: str) -> types.ModuleType:
    if module_part.endswith(".py") or "/" in module_part or os.sep in module_part:
        return _import_path(pathlib.Path(module_part))
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, for the console script
    loaded = getattr(sys.modules.get(module_part), "__file__", None)
    meant = _file_on_path(module_part) if loaded else None
    if loaded and meant is not None and pathlib.Path(loaded).resolve() != meant.resolve():
        # An earlier call in this process imported another folder's module of that name:
        # the file the current folder or sys.path holds now is meant (``main()`` called
        # from several folders, or with sys.path changed between calls).
        return _import_path(meant)
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as e:
        if e.name and module_part.startswith(e.name):
            raise UsageError(
                f"no module named {module_part!r} in the current folder or on sys.path; "
                f"give its name or the path to its .py file ({_EXAMPLE})."
            ) from e
        raise UsageError(f"importing {module_part!r} raised {_describe(e)}") from e
    except Exception as e:
        raise UsageError(f"importing {module_part!r} raised {_describe(e)}") from e


def _file_on_path(module_part: str) -> pathlib.Path | None:
    """The ``.py`` file that importing ``module_part`` afresh would run.

    The current folder's first, then the first on ``sys.path`` (top-level modules only).
    """
    local = pathlib.Path(os.getcwd(), *module_part.split(".")).with_suffix(".py")
    if local.is_file():
        return local
    if "." in module_part:
        return None
    spec = importlib.machinery.PathFinder.find_spec(module_part, sys.path)
    origin = getattr(spec, "origin", None)
    return pathlib.Path(origin) if origin and origin.endswith(".py") else None


def _import_path(path: pathlib.Path) -> types.ModuleType:
    if not path.is_file():
        raise UsageError(f"{os.fspath(path)!r} is not a file ({_EXAMPLE}).")
    name = path.stem if path.stem.isidentifier() and path.stem not in sys.modules else None
    name = name or f"_onnx_export_factory_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{os.fspath(path)!r} cannot be imported as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # so that it can import its neighbours
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise UsageError(f"importing {os.fspath(path)!r} raised {_describe(e)}") from e
    return module


def _check_result(reference: str, result: Any) -> ModelCall:
    expected = "(model, args) or (model, args, kwargs), with args a tuple and kwargs a dict"
    if not isinstance(result, tuple | list) or len(result) not in (2, 3):
        raise UsageError(f"{reference}() must return {expected}; it returned {_kind(result)}.")
    model, args, kwargs = (*result, {}) if len(result) == 2 else result
    if not callable(model):
        raise UsageError(f"{reference}(): the model must be callable, got {_kind(model)}.")
    if not isinstance(args, tuple | list):
        raise UsageError(
            f"{reference}(): args must be a tuple of positional arguments such as (x,), "
            f"got {_kind(args)}."
        )
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise UsageError(
            f"{reference}(): kwargs must be a dict of keyword arguments, got {_kind(kwargs)}."
        )
    return ModelCall(model, tuple(args), kwargs)


def _kind(value: object) -> str:
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _describe(error: BaseException) -> str:
    """``"ZeroDivisionError: division by zero (at models.py:12)"``."""
    text = f"{type(error).__name__}: {error}".strip()
    if isinstance(error, SyntaxError) and error.filename:
        return f"{text} (at {pathlib.Path(error.filename).name}:{error.lineno})"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _is_user_file(f.filename)]
    if frames:
        text += f" (at {pathlib.Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return text


def _is_user_file(filename: str) -> bool:
    """Not a library's: outside the standard library, site-packages and this package."""
    libraries = {sysconfig.get_path("stdlib"), sysconfig.get_path("purelib")}
    libraries.add(str(pathlib.Path(__file__).parent))
    return not filename.startswith("<") and not any(
        filename.startswith(folder) for folder in libraries if folder
    )
