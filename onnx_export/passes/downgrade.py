"""Convert a model below opset 18 with ``onnx.version_converter``.

Torchlib's functions are written for opset 18 and onnxscript's converter only goes up, so
opsets 16 and 17 (torch.onnx's ``opset_version``) go through ONNX's own converter. That
converter has no way down for two common changes of opset 18, so they are done here:
``Reduce*`` ops whose ``axes`` became an input go back to the ``axes`` attribute, and
``Split`` with ``num_outputs`` goes back to sizes (or an equal split). The other ops go
through the converter; one without an older form (``LayerNormalization`` at 16) fails
with an error that names it instead of a model that would not load.
"""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

__all__ = ["OpsetDowngradeError", "downgrade_opset"]

_HIDDEN = "onnx_export.downgrade"
#: Reductions whose ``axes`` moved from an attribute to an input in opset 18.
_REDUCE = {
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
}  # fmt: skip


class OpsetDowngradeError(ValueError):
    """The model uses an op that cannot be brought below opset 18."""


def _culprit(message: str) -> str | None:
    for pattern in (
        r"No Previous Version of (\w+)",
        r"OpType: (\w+)",
        r"Adapter From Version \$\d+ for (\w+)",
        r"for (\w+)\s*$",
    ):
        match = re.search(pattern, message.strip())
        if match:
            return match.group(1)
    return None


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _split_sizes(node: onnx.NodeProto, shapes: dict[str, tuple[object, ...]]) -> list[int] | None:
    """Sizes for a ``num_outputs`` split: ``None`` for an equal split, error if unknowable."""
    count = len(node.output)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    shape = shapes.get(node.input[0])
    size = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
    if isinstance(size, int):
        if size % count == 0:
            return None
        chunk = math.ceil(size / count)
        return [chunk] * (count - 1) + [size - chunk * (count - 1)]
    raise OpsetDowngradeError(
        f"Split {node.name!r} divides a dimension whose size is not known at export into "
        f"{count} parts: opset 17 and older cannot express ONNX 18's uneven split. Export "
        "at opset 18 or higher, or with that dimension static."
    )


def _restore(graph: onnx.GraphProto, shapes: dict[str, tuple[object, ...]]) -> None:
    """Write the hidden ``Reduce*``/``Split`` nodes in their opset-13 form."""
    constants = _constants(graph)
    for node in graph.node:
        if node.domain != _HIDDEN:
            continue
        node.domain = ""
        attributes = [
            a for a in node.attribute if a.name not in ("noop_with_empty_axes", "num_outputs")
        ]
        if node.op_type == "Split" and len(node.input) < 2:
            sizes = _split_sizes(node, shapes)
            if sizes is not None:
                name = f"{node.name or node.output[0]}_split_sizes"
                graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), name))
                node.input.append(name)
        elif node.op_type in _REDUCE and len(node.input) > 1 and node.input[1]:
            axes = constants.get(node.input[1])
            if axes is None:
                raise OpsetDowngradeError(
                    f"{node.op_type} {node.name!r} takes its axes from a computed value; "
                    "before opset 18 they must be constants. Export at opset 18 or higher."
                )
            attributes.append(helper.make_attribute("axes", [int(a) for a in axes.ravel()]))
            del node.input[1:]
        del node.attribute[:]
        node.attribute.extend(attributes)


def _layer_norm_nodes(node: onnx.NodeProto, rank: int | None) -> list[onnx.NodeProto]:
    """``LayerNormalization`` (opset 17) as opset-13 ops: mean, variance, scale, shift."""
    if len(node.output) > 1 and any(node.output[1:]):
        raise OpsetDowngradeError(
            f"LayerNormalization {node.name!r} returns its mean or inverse deviation, which "
            "opset 16 has no op for. Export at opset 17 or higher."
        )
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    axis, eps = int(attrs.get("axis", -1)), float(attrs.get("epsilon", 1e-5))
    if axis >= 0 and rank is None:
        raise OpsetDowngradeError(
            f"LayerNormalization {node.name!r} normalises from axis {axis} of an input of "
            "unknown rank. Export at opset 17 or higher."
        )
    axes = list(range(axis - (rank or 0), 0)) if axis >= 0 else list(range(axis, 0))
    x, out, p = node.input[0], node.output[0], f"{node.name or node.output[0]}_ln"
    made = [
        helper.make_node("ReduceMean", [x], [f"{p}_mean"], axes=axes, keepdims=1),
        helper.make_node("Sub", [x, f"{p}_mean"], [f"{p}_centred"]),
        helper.make_node("Mul", [f"{p}_centred", f"{p}_centred"], [f"{p}_square"]),
        helper.make_node("ReduceMean", [f"{p}_square"], [f"{p}_var"], axes=axes, keepdims=1),
        helper.make_node("CastLike", [f"{p}_eps_float", x], [f"{p}_eps"]),  # x's dtype
        helper.make_node("Add", [f"{p}_var", f"{p}_eps"], [f"{p}_var_eps"]),
        helper.make_node("Sqrt", [f"{p}_var_eps"], [f"{p}_std"]),
        helper.make_node("Div", [f"{p}_centred", f"{p}_std"], [f"{p}_normed"]),
    ]
    scaled = f"{p}_scaled" if len(node.input) > 2 and node.input[2] else out
    made.append(helper.make_node("Mul", [f"{p}_normed", node.input[1]], [scaled]))
    if scaled != out:
        made.append(helper.make_node("Add", [scaled, node.input[2]], [out]))
    return [*made, helper.make_node("Constant", [], [f"{p}_eps_float"], value_float=eps)]


def _expand_layer_norms(
    proto: onnx.ModelProto, target: int, shapes: dict[str, tuple[object, ...]]
) -> None:
    """Below opset 17, ``LayerNormalization`` becomes its formula (ONNX's own definition)."""
    if target >= 17:
        return
    nodes: list[onnx.NodeProto] = []
    for node in proto.graph.node:
        if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx"):
            shape = shapes.get(node.input[0])
            new = _layer_norm_nodes(node, len(shape) if shape is not None else None)
            nodes.extend([new[-1], *new[:-1]])  # the epsilon constant first
        else:
            nodes.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)


def _hide(proto: onnx.ModelProto) -> None:
    """Move ``Reduce*``/``Split`` out of the converter's way (a private domain)."""
    for node in proto.graph.node:
        if node.domain in ("", "ai.onnx") and (node.op_type in _REDUCE or node.op_type == "Split"):
            node.domain = _HIDDEN
    proto.opset_import.append(helper.make_opsetid(_HIDDEN, 1))


def _shapes(model: ir.Model) -> dict[str, tuple[object, ...]]:
    shapes: dict[str, tuple[object, ...]] = {}
    for node in model.graph:
        for value in (*node.inputs, *node.outputs):
            if value is not None and value.name and value.shape is not None:
                shapes[value.name] = tuple(d if isinstance(d, int) else None for d in value.shape)
    for value in model.graph.inputs:
        if value.name and value.shape is not None:
            shapes[value.name] = tuple(d if isinstance(d, int) else None for d in value.shape)
    return shapes


def _check_convertible(model: ir.Model, source: int, target: int) -> None:
    """Refuses what the conversion below cannot do, before it reads any weight."""
    from onnx_export._fake import WeightPlaceholder

    if any(isinstance(v.const_value, WeightPlaceholder) for v in model.graph.initializers.values()):
        raise OpsetDowngradeError(
            f"Converting to opset {target} needs the weights' data, and this export has "
            "placeholders (a fake or meta-device model). Export at opset 18 or higher, or "
            "export the model with real weights."
        )
    for node in model.graph.all_nodes():
        if node.graph is not model.graph and (
            node.op_type in _REDUCE or node.op_type in ("Split", "LayerNormalization")
        ):
            raise OpsetDowngradeError(
                f"{node.op_type} inside a control-flow body (If/Loop/Scan) cannot be "
                f"converted from opset {source} to {target} here. Export at opset 18 or higher."
            )


def downgrade_opset(model: ir.Model, target: int) -> ir.Model:
    """Return ``model`` converted to opset ``target`` (< 18), checked by ``onnx.checker``.

    Raises:
        OpsetDowngradeError: An op has no form at ``target``; the message names it and
            how many nodes use it.
    """
    source = model.opset_imports.get("", target)
    if source <= target:
        return model
    _check_convertible(model, source, target)
    proto = ir.serde.serialize_model(model)
    shapes = _shapes(model)
    _expand_layer_norms(proto, target, shapes)
    _hide(proto)
    try:
        converted = onnx.version_converter.convert_version(proto, target)
        _restore(converted.graph, shapes)
        del converted.opset_import[:]
        converted.opset_import.extend(o for o in proto.opset_import if o.domain != _HIDDEN)
        for opset in converted.opset_import:
            if opset.domain in ("", "ai.onnx"):
                opset.version = target
        onnx.checker.check_model(converted)
    except OpsetDowngradeError:
        raise
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
    return ir.serde.deserialize_model(converted)
