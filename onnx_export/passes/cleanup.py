"""Small clean-ups after onnxscript's optimizer: nodes that provably do nothing.

A ``Reshape`` whose static input shape equals the shape it produces (after resolving
``-1`` and ``0``) is an identity (torch's attention code reshapes to the same shape); the
optimizer keeps it because it does not resolve the target. Removing it is linear in the
number of nodes.
"""

from __future__ import annotations

import onnx_ir as ir
import onnxscript.optimizer

__all__ = ["remove_identity_reshapes"]


def _static_dims(value: ir.Value) -> list[int] | None:
    shape = value.shape
    if shape is None:
        return None
    dims = [d for d in shape.dims if isinstance(d, int)]
    return dims if len(dims) == len(shape.dims) else None


def _resolved(target: list[int], dims: list[int], allowzero: bool) -> list[int] | None:
    """The shape Reshape produces: ``0`` copies the input's dim, ``-1`` takes the rest."""
    if len(target) != len(dims) or target.count(-1) > 1:
        return None
    out = [dims[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if -1 in out:
        known = 1
        for d in out:
            known *= d if d != -1 else 1
        total = 1
        for d in dims:
            total *= d
        if known == 0 or total % known:
            return None
        out[out.index(-1)] = total // known
    return out


def _is_identity_reshape(node: ir.Node) -> bool:
    if node.op_type != "Reshape" or node.domain != "" or len(node.inputs) < 2:
        return False
    data, target = node.inputs[0], node.inputs[1]
    if data is None or target is None or target.const_value is None:
        return False
    dims = _static_dims(data)
    if dims is None:
        return False
    wanted = [int(d) for d in target.const_value.numpy().reshape(-1).tolist()]
    allowzero = node.attributes.get_int("allowzero", 0) == 1
    return _resolved(wanted, dims, allowzero) == dims


def remove_identity_reshapes(model: ir.Model) -> int:
    """Remove identity ``Reshape`` nodes from the main graph; return how many."""
    graph = model.graph
    outputs = set(graph.outputs)
    removed = 0
    for node in list(graph):
        if not _is_identity_reshape(node) or node.outputs[0] in outputs:
            continue
        source = node.inputs[0]
        assert source is not None
        ir.convenience.replace_all_uses_with(node.outputs[0], source)
        graph.remove(node, safe=True)
        removed += 1
    if removed:
        onnxscript.optimizer.remove_unused_nodes(model)  # their shape constants, now unused
    return removed
