"""SARIF 2.1.0 writing and reading (internal; use ``DiagnosticContext``).

``_types`` is the object model (typed dicts named after the specification's objects),
``_uris`` maps paths to artifact locations, ``_location_writer`` and ``_log`` build a log
from a :class:`RunRecord`, and ``_io`` writes files atomically and reads them back.
"""

from __future__ import annotations

from ._io import load_sarif, write_json_atomic
from ._log import (
    SARIF_SCHEMA_URI,
    SARIF_VERSION,
    RunRecord,
    build_log,
    format_time,
)
from ._schema import SCHEMA_SHA256, schema_path
from ._uris import SRCROOT

__all__ = [
    "SARIF_SCHEMA_URI",
    "SARIF_VERSION",
    "SCHEMA_SHA256",
    "SRCROOT",
    "RunRecord",
    "build_log",
    "format_time",
    "load_sarif",
    "schema_path",
    "write_json_atomic",
]
