"""Shared pytest configuration: makes the project root importable when needed.

The project need not be pip-installed: if ``onnx_export`` (or this ``tests`` folder as
a package, for ``tests.helpers``) cannot be imported, the checkout's root is put on
``sys.path``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


_missing = not (_importable("onnx_export") and _importable("tests.helpers"))
if _missing and str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))
