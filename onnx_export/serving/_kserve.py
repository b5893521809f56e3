"""A KServe InferenceService manifest for a Triton model repository (YAML, written by hand)."""

from __future__ import annotations

import json
import re

from ._config_text import ServingOptions

__all__ = ["manifest_text"]


def manifest_text(name: str, storage_uri: str, options: ServingOptions) -> str:
    """An InferenceService serving the repository at ``storage_uri`` with KServe's Triton.

    KServe's ``kserve-tritonserver`` runtime serves the ``onnx`` model format over the v2
    protocol and loads every model of the repository; ``name`` becomes a DNS-1123 label.
    """
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63] or "model"
    lines = [
        "apiVersion: serving.kserve.io/v1beta1",
        "kind: InferenceService",
        "metadata:",
        f"  name: {label}",
        "spec:",
        "  predictor:",
        "    model:",
        "      modelFormat:",
        "        name: onnx",
        "      runtime: kserve-tritonserver",
        "      protocolVersion: v2",
        f"      storageUri: {json.dumps(storage_uri)}",
    ]
    if options.device == "cuda":
        lines += ["      resources:", "        limits:", '          nvidia.com/gpu: "1"']
    return "\n".join(lines) + "\n"
