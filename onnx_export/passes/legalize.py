"""Bool data through ops that ONNX allows on bools but ONNX Runtime has no kernel for.

``Where`` with bool branches (``mask.masked_fill(cond, False)``), ``Max``/``Min``/``Clip`` of bools
(``clamp`` of a bool tensor) are valid ONNX, yet ONNX Runtime refuses to load them
("Could not find an implementation for Where(16)"). Their bool data inputs are cast to
``INT32`` and the result back to ``BOOL``, which is exact. Linear in the number of nodes;
subgraphs included.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_export.passes._casts import cast_input, cast_output_back, every_node

__all__ = ["legalize_bool_data"]

#: op type -> the input positions that carry data (``Where``'s condition stays bool).
_BOOL_DATA_INPUTS: dict[str, slice] = {
    "Where": slice(1, 3),
    "Max": slice(None),
    "Min": slice(None),
    "Clip": slice(None),
}


def _is_bool(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == ir.DataType.BOOL


def _legalize(node: ir.Node) -> bool:
    positions = _BOOL_DATA_INPUTS.get(node.op_type) if node.domain == "" else None
    if positions is None or not _is_bool(node.outputs[0]):
        return False
    data = [i for i in range(len(node.inputs))[positions] if _is_bool(node.inputs[i])]
    for i in data:
        cast_input(node, i, ir.DataType.INT32, f"cast_{i}")
    if data:
        cast_output_back(node, ir.DataType.INT32, "to_bool", "int32")
    return bool(data)


def legalize_bool_data(model: ir.Model) -> int:
    """Route bool data around ``Where``/``Max``/``Min``/``Clip`` through INT32; return the count."""
    return sum(_legalize(node) for node in every_node(model))
