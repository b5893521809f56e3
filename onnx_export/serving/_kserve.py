"""A KServe InferenceService manifest for a Triton model repository (YAML, written by hand)."""

from __future__ import annotations

import json
import re

from ._config_text import ServingOptions

__all__ = ["manifest_text", "openai_manifest_text"]

#: The port the OpenAI-compatible server listens on in its container (KServe's default).
OPENAI_PORT = 8080


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


def openai_manifest_text(
    name: str,
    storage_uri: str,
    *,
    image: str,
    device: str = "cpu",
    max_batch: int = 16,
    max_waiting: int = 64,
) -> str:
    """An InferenceService running ``onnx-export serve --openai`` in ``image``.

    A custom predictor container: KServe's storage initializer downloads ``storage_uri``
    (the exported folder) to ``/mnt/models`` (the ``STORAGE_URI`` variable asks for it), the
    container serves it on port 8080, and ``/health`` is its readiness and liveness probe.
    Clients call ``http://NAME.NAMESPACE.../v1/chat/completions``.
    """
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63] or "model"
    arguments = [
        "serve", "/mnt/models", "--openai", "--host", "0.0.0.0", "--port", str(OPENAI_PORT),
        "--name", name, "--max-batch-size", str(max_batch), "--max-waiting", str(max_waiting),
        *(["--device", "cuda"] if device == "cuda" else []),
    ]  # fmt: skip
    probe = [
        "          httpGet:",
        "            path: /health",
        f"            port: {OPENAI_PORT}",
    ]
    lines = [
        "apiVersion: serving.kserve.io/v1beta1",
        "kind: InferenceService",
        "metadata:",
        f"  name: {label}",
        "spec:",
        "  predictor:",
        "    containers:",
        "      - name: kserve-container",
        f"        image: {json.dumps(image)}",
        '        command: ["onnx-export"]',
        f"        args: {json.dumps(arguments)}",
        "        env:",
        "          - name: STORAGE_URI",
        f"            value: {json.dumps(storage_uri)}",
        "        ports:",
        f"          - containerPort: {OPENAI_PORT}",
        "            protocol: TCP",
        "        readinessProbe:",
        *probe,
        "          periodSeconds: 5",
        "        livenessProbe:",
        *probe,
        "          periodSeconds: 30",
    ]
    if device == "cuda":
        lines += ["        resources:", "          limits:", '            nvidia.com/gpu: "1"']
    return "\n".join(lines) + "\n"
