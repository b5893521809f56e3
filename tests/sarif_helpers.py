"""Shared helpers for tests that produce SARIF logs: schema validation and normalisation.

Every SARIF log a test produces goes through :func:`assert_valid_sarif`. Golden files are
compared after :func:`normalize_sarif`, which replaces times, the tool version and paths
under a given root with placeholders.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import jsonschema

from onnx_export.diagnostics.sarif import schema_path

SARIF_SCHEMA_PATH = schema_path()
TIME_PLACEHOLDER = "<TIME>"
VERSION_PLACEHOLDER = "<VERSION>"
ROOT_PLACEHOLDER = "<ROOT>"
_TIME_KEYS = frozenset({"startTimeUtc", "endTimeUtc", "timeUtc", "lastModifiedTimeUtc"})


@functools.cache
def _validator() -> jsonschema.Draft4Validator:
    if not SARIF_SCHEMA_PATH.is_file():
        raise FileNotFoundError(
            f"The SARIF 2.1.0 schema is missing at {SARIF_SCHEMA_PATH}; it is package data "
            "of onnx_export.diagnostics (diagnostics/sarif/schema/)."
        )
    schema = json.loads(SARIF_SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def assert_valid_sarif(log: Mapping[str, Any]) -> None:
    """Fails, listing every schema violation with its JSON path, unless ``log`` is valid."""
    errors = sorted(_validator().iter_errors(log), key=lambda error: list(error.absolute_path))
    if errors:
        lines = [
            f"- at /{'/'.join(str(part) for part in error.absolute_path)}: {error.message}"
            for error in errors
        ]
        raise AssertionError(
            f"The SARIF log violates the 2.1.0 schema ({len(errors)} error(s)):\n"
            + "\n".join(lines)
        )
    # The log must also survive a JSON round trip unchanged (no tuples, NaN or objects).
    assert json.loads(json.dumps(log, allow_nan=False)) == log


def normalize_sarif(
    log: Mapping[str, Any], root: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Returns a copy of ``log`` that is stable across runs and machines.

    Times become ``<TIME>``, ``tool.driver.version`` becomes ``<VERSION>``, and ``root``
    (as a path and as a ``file://`` URI) becomes ``<ROOT>`` inside every string.
    """
    normalized: dict[str, Any] = copy.deepcopy(dict(log))
    replacements: list[tuple[str, str]] = []
    if root is not None:
        resolved = pathlib.Path(root).resolve()
        for variant in {resolved, pathlib.Path(os.path.abspath(root))}:
            replacements.append((variant.as_uri(), f"file://{ROOT_PLACEHOLDER}"))
            replacements.append((str(variant), ROOT_PLACEHOLDER))
    replacements.sort(key=lambda pair: len(pair[0]), reverse=True)
    for run in normalized.get("runs", []):
        driver = run.get("tool", {}).get("driver", {})
        if "version" in driver:
            driver["version"] = VERSION_PLACEHOLDER
    return _normalize(normalized, replacements)


def _normalize(value: Any, replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, dict):
        return {
            key: TIME_PLACEHOLDER if key in _TIME_KEYS else _normalize(item, replacements)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_normalize(item, replacements) for item in value]
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
    return value
