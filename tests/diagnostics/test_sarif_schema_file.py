"""The SARIF schema ships inside the package, unchanged from OASIS."""

from __future__ import annotations

import hashlib
import json

import jsonschema

from onnx_export.diagnostics.sarif import SCHEMA_SHA256, schema_path


def test_the_schema_is_package_data_with_the_recorded_hash() -> None:
    data = schema_path().read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256
    schema = json.loads(data)
    jsonschema.Draft4Validator.check_schema(schema)
    assert schema["properties"]["version"]["enum"] == ["2.1.0"]
