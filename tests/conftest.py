"""Shared pytest configuration: the tests always test this checkout.

The checkout's root goes first on ``sys.path``, so ``onnx_export`` (with its ``adapters``
and ``diagnostics`` links) and ``tests.helpers`` come from here even when another copy of
the project is pip-installed (e.g. an editable install of a different clone).
"""

from __future__ import annotations

import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

if sys.path[:1] != [str(PROJECT_ROOT)]:
    sys.path.insert(0, str(PROJECT_ROOT))
