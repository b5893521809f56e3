"""The SARIF 2.1.0 JSON schema, shipped as package data (see ``schema/README.md``)."""

from __future__ import annotations

import pathlib

SCHEMA_FILE = "sarif-schema-2.1.0.json"
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


def schema_path() -> pathlib.Path:
    """The installed copy of the official OASIS SARIF 2.1.0 schema (JSON Schema draft-04)."""
    return pathlib.Path(__file__).with_name("schema") / SCHEMA_FILE
