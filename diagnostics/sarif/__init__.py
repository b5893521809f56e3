"""SARIF 2.1.0 writing and reading (internal; use :class:`diagnostics.DiagnosticContext`).

``_types`` is the object model (typed dicts named after the specification's objects),
``_uris`` maps paths to artifact locations, ``_location_writer`` and ``_log`` build a log
from a :class:`RunRecord`, and ``_io`` writes files atomically and reads them back.
"""

from __future__ import annotations

from diagnostics.sarif._io import load_sarif, write_json_atomic
from diagnostics.sarif._log import (
    SARIF_SCHEMA_URI,
    SARIF_VERSION,
    RunRecord,
    build_log,
    format_time,
)
from diagnostics.sarif._uris import SRCROOT

__all__ = [
    "SARIF_SCHEMA_URI",
    "SARIF_VERSION",
    "SRCROOT",
    "RunRecord",
    "build_log",
    "format_time",
    "load_sarif",
    "write_json_atomic",
]
