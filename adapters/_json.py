"""Strict JSON helpers shared by the spec modules: typed readers that name the bad field.

Every reader takes ``where``, the dotted field path used in error messages, so a tampered
``inputs[2].tensor.dtype`` is reported as exactly that.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from ._errors import AdapterSpecError, UnsupportedValueError

__all__ = [
    "JsonValue",
    "Constant",
    "canonical_json",
    "check_json_value",
    "spec_error",
    "read_object",
    "read_list",
    "read_str",
    "read_int",
    "read_constant",
    "is_constant",
]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A value that survives ``json.dumps``/``json.loads`` unchanged (finite floats only)."""

Constant: TypeAlias = bool | int | float | str
"""A non-tensor leaf recorded in a spec and checked (inputs) or re-inserted (outputs)."""

_CONSTANT_TYPES = (bool, int, float, str)


def spec_error(where: str, expected: str, got: object) -> AdapterSpecError:
    """Build an :class:`AdapterSpecError` for field ``where``.

    Args:
        where: The field path, e.g. ``"inputs[2].tensor.dtype"``.
        expected: What the field should hold, in words.
        got: The offending value (shown with ``repr``, truncated).

    Returns:
        The error, ready to raise.

    Example:
        >>> str(spec_error("version", "1", 2)).startswith("adapter spec field 'version'")
        True
    """
    shown = repr(got)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return AdapterSpecError(
        f"adapter spec field {where!r}: expected {expected}, got {shown}. "
        "The adapter metadata is malformed or was edited after export; re-export the model "
        "or pass a correct spec explicitly."
    )


def is_constant(value: object) -> bool:
    """Tell whether ``value`` is a JSON constant leaf: ``bool``, ``int``, finite ``float``, ``str``.

    Args:
        value: Any object.

    Returns:
        True for the four constant types (exact types; finite floats only).

    Example:
        >>> is_constant(2.0), is_constant(float("nan")), is_constant(None)
        (True, False, False)
    """
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in _CONSTANT_TYPES


def check_json_value(value: object, where: str) -> JsonValue:
    """Return ``value`` as plain JSON data (tuples become lists) or raise.

    Args:
        value: The value to check, e.g. a pytree context.
        where: Where the value comes from, for the error message.

    Returns:
        An equivalent value made of ``None``, bool, int, finite float, str, list and
        ``dict[str, ...]``.

    Raises:
        UnsupportedValueError: Some part of ``value`` is not JSON data.

    Example:
        >>> check_json_value(("a", ["b", 1]), "context")
        ['a', ['b', 1]]
    """
    if value is None or is_constant(value):
        return value  # type: ignore[return-value]  # is_constant narrows to JSON scalars
    if isinstance(value, list | tuple):
        return [check_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return {k: check_json_value(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise UnsupportedValueError(
        f"{where}: expected JSON data (None, bool, int, finite float, str, list, dict with str "
        f"keys), got {type(value).__qualname__} {value!r:.60}. Register the class with a "
        "context made of JSON data, or pass plain containers."
    )


def canonical_json(value: JsonValue) -> str:
    """Serialise JSON data deterministically (sorted keys, no spaces, no NaN).

    Args:
        value: JSON data, e.g. from :func:`check_json_value`.

    Returns:
        The JSON text.

    Example:
        >>> canonical_json({"b": 1, "a": [True, None]})
        '{"a":[true,null],"b":1}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def read_object(
    obj: object, where: str, required: Sequence[str], optional: Sequence[str] = ()
) -> Mapping[str, object]:
    """Read a JSON object with exactly the given keys.

    Args:
        obj: The parsed JSON value.
        where: Its field path.
        required: Keys that must be present.
        optional: Keys that may be present.

    Returns:
        The object, typed as a mapping.

    Raises:
        AdapterSpecError: Not an object, a key missing, or an unknown key.

    Example:
        >>> dict(read_object({"a": 1}, "spec", ["a"]))
        {'a': 1}
    """
    if not isinstance(obj, dict):
        raise spec_error(where, "a JSON object", obj)
    for key in required:
        if key not in obj:
            raise spec_error(f"{where}.{key}", "a value (the field is required)", "nothing")
    allowed = set(required) | set(optional)
    for key in obj:
        if key not in allowed:
            raise spec_error(f"{where}.{key}", f"no such field (known: {sorted(allowed)})", key)
    return obj


def read_list(obj: object, where: str) -> list[object]:
    """Read a JSON array.

    Args:
        obj: The parsed JSON value.
        where: Its field path.

    Returns:
        The list.

    Raises:
        AdapterSpecError: Not a list.

    Example:
        >>> read_list([1], "shape")
        [1]
    """
    if not isinstance(obj, list):
        raise spec_error(where, "a JSON array", obj)
    return obj


def read_str(obj: object, where: str, *, choices: Sequence[str] = (), nonempty: bool = True) -> str:
    """Read a JSON string, optionally one of ``choices``.

    Args:
        obj: The parsed JSON value.
        where: Its field path.
        choices: Allowed values; empty means any string.
        nonempty: Reject the empty string.

    Returns:
        The string.

    Raises:
        AdapterSpecError: Not a string, empty, or not among ``choices``.

    Example:
        >>> read_str("leaf", "kind", choices=["leaf", "none"])
        'leaf'
    """
    if not isinstance(obj, str) or (nonempty and not obj):
        raise spec_error(where, "a non-empty string" if nonempty else "a string", obj)
    if choices and obj not in choices:
        raise spec_error(where, f"one of {', '.join(choices)}", obj)
    return obj


def read_int(obj: object, where: str, *, minimum: int = 0) -> int:
    """Read a JSON integer (not a bool) no smaller than ``minimum``.

    Args:
        obj: The parsed JSON value.
        where: Its field path.
        minimum: The smallest accepted value.

    Returns:
        The integer.

    Raises:
        AdapterSpecError: Not an integer or too small.

    Example:
        >>> read_int(3, "shape[0]")
        3
    """
    if type(obj) is not int or obj < minimum:
        raise spec_error(where, f"an integer >= {minimum}", obj)
    return obj


def read_constant(obj: object, where: str) -> Constant:
    """Read a constant leaf value: bool, int, finite float or str.

    Args:
        obj: The parsed JSON value.
        where: Its field path.

    Returns:
        The constant.

    Raises:
        AdapterSpecError: Another JSON type (null, list, object) or a non-finite float.

    Example:
        >>> read_constant(2.5, "inputs[1].value")
        2.5
    """
    if not is_constant(obj):
        raise spec_error(where, "a bool, int, finite float or string", obj)
    return obj  # type: ignore[return-value]  # is_constant checked the type
