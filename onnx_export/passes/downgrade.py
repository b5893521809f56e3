"""Convert a model below opset 18 with ``onnx.version_converter``.

Torchlib's functions are written for opset 18 and onnxscript's converter only goes up, so
opsets 16 and 17 (torch.onnx's ``opset_version``) go through ONNX's own converter. It has
no older form for some ops (``Split`` with ``num_outputs``, ``LayerNormalization`` at 16):
the error then names them instead of writing a model that would not load.
"""

from __future__ import annotations

import re

import onnx
import onnx_ir as ir

__all__ = ["OpsetDowngradeError", "downgrade_opset"]


class OpsetDowngradeError(ValueError):
    """The model uses an op that ``onnx.version_converter`` cannot bring down."""


def _culprit(message: str) -> str | None:
    for pattern in (
        r"for (\w+)\s*$",
        r"No Previous Version of (\w+)",
        r"OpType: (\w+)",
        r"Adapter From Version \$\d+ for (\w+)",
    ):
        match = re.search(pattern, message.strip())
        if match:
            return match.group(1)
    return None


def downgrade_opset(model: ir.Model, target: int) -> ir.Model:
    """Return ``model`` converted to opset ``target`` (< 18), checked by ``onnx.checker``.

    Raises:
        OpsetDowngradeError: An op has no form at ``target``; the message names it and
            how many nodes use it.
    """
    source = model.opset_imports.get("", target)
    if source <= target:
        return model
    proto = ir.serde.serialize_model(model)
    try:
        converted = onnx.version_converter.convert_version(proto, target)
        onnx.checker.check_model(converted)
    except Exception as e:
        op = _culprit(str(e))
        uses = sum(1 for node in model.graph.all_nodes() if node.op_type == op) if op else 0
        what = f"{op} ({uses} node(s))" if op else "an op"
        raise OpsetDowngradeError(
            f"Cannot convert the model from opset {source} to {target}: {what} has no form "
            f"at opset {target} that onnx.version_converter can produce "
            f"({str(e).strip().splitlines()[-1][:200]}). Export at opset 18 or higher, or "
            "rewrite the model to avoid that op."
        ) from e
    result = ir.serde.deserialize_model(converted)
    return result
