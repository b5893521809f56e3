"""The one way golden files are compared and regenerated (see ``tests/golden/README.md``)."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

GOLDEN = pathlib.Path(__file__).with_name("golden")
UPDATE_VARIABLE = "ONNX_EXPORT_UPDATE_GOLDEN"


def check_golden(name: str, value: Any) -> None:
    """Compares ``value`` with ``tests/golden/<name>.json``; rewrites the file when asked to."""
    path = GOLDEN / f"{name}.json"
    if os.environ.get(UPDATE_VARIABLE) == "1":
        path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert value == expected, (
        f"tests/golden/{name}.json no longer matches; if the change is intended, regenerate "
        f"with `{UPDATE_VARIABLE}=1 python -m pytest -k golden` and review the diff"
    )
