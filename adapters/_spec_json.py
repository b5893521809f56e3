"""Reading and writing :class:`~adapters.AdapterSpec` JSON, strictly.

Reading checks every field's JSON type and rejects unknown fields; the semantic checks
(counts, kinds, unique names) run when the dataclasses are constructed. Nothing read is ever
imported or executed.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, cast

from ._dim_conditions import ConditionSyntaxError, DimCondition
from ._errors import AdapterSpecError
from ._json import (
    read_constant,
    read_int,
    read_list,
    read_object,
    read_str,
    spec_error,
)
from ._spec_parts import (
    FORMAT_VERSION,
    LEAF_KINDS,
    PARAMETER_KINDS,
    AxisRange,
    Dim,
    DimRelation,
    LeafKind,
    LeafSpec,
    ParameterKind,
    ParameterSpec,
    TensorSpec,
)
from ._treespec import TreeSpec

__all__ = ["spec_to_json_obj", "spec_fields_from_json_text"]


class SpecFields(Protocol):
    """What the JSON form reads of an :class:`~adapters.AdapterSpec` (its fields)."""

    @property
    def version(self) -> int: ...
    @property
    def parameters(self) -> tuple[ParameterSpec, ...]: ...
    @property
    def input_tree(self) -> TreeSpec: ...
    @property
    def inputs(self) -> tuple[LeafSpec, ...]: ...
    @property
    def output_tree(self) -> TreeSpec: ...
    @property
    def outputs(self) -> tuple[LeafSpec, ...]: ...


_TOP_FIELDS = ("version", "parameters", "input_tree", "inputs", "output_tree", "outputs")


def spec_to_json_obj(spec: SpecFields) -> dict[str, object]:
    """Convert a spec to JSON data.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import build_adapter_spec
        >>> obj = spec_to_json_obj(build_adapter_spec(None, (), {}, 1))
        >>> obj["outputs"]
        [{'path': 'output', 'kind': 'constant', 'value': 1}]
    """
    obj: dict[str, object] = {
        "version": spec.version,
        "parameters": [_parameter_to_json(p) for p in spec.parameters],
        "input_tree": spec.input_tree.to_json_obj(),
        "inputs": [_leaf_to_json(leaf) for leaf in spec.inputs],
        "output_tree": spec.output_tree.to_json_obj(),
        "outputs": [_leaf_to_json(leaf) for leaf in spec.outputs],
    }
    relations = getattr(spec, "relations", ())
    if relations:  # only then: older readers read the other specs unchanged
        obj["relations"] = [
            {
                "dim": r.dim,
                "terms": [[name, coef] for name, coef in r.terms],
                "constant": r.constant,
                "origin": r.origin,
            }
            for r in relations
        ]
    conditions = getattr(spec, "conditions", ())
    if conditions:  # likewise: only then
        obj["conditions"] = [{"expression": c.expression, "origin": c.origin} for c in conditions]
    return obj


def _parameter_to_json(p: ParameterSpec) -> dict[str, object]:
    obj: dict[str, object] = {"name": p.name, "kind": p.kind}
    if p.has_default:
        obj["default"] = p.default
    return obj


def _leaf_to_json(leaf: LeafSpec) -> dict[str, object]:
    obj: dict[str, object] = {"path": leaf.path, "kind": leaf.kind}
    if leaf.tensor is not None:
        t = leaf.tensor
        obj["tensor"] = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
        if t.made_static:  # only then: older readers read the other specs unchanged
            obj["tensor"]["made_static"] = list(t.made_static)  # type: ignore[index]
        if t.python_int:  # likewise: only then
            obj["tensor"]["python_int"] = True  # type: ignore[index]
        if t.int_range is not None:
            obj["tensor"]["int_range"] = list(t.int_range)  # type: ignore[index]
        if t.axis_ranges:  # likewise: only then, so older readers read the others
            obj["tensor"]["axis_ranges"] = [_axis_range_to_json(r) for r in t.axis_ranges]  # type: ignore[index]
        if t.cast_from:  # likewise: only then
            obj["tensor"]["cast_from"] = list(t.cast_from)  # type: ignore[index]
    else:
        obj["value"] = leaf.value
    return obj


def _axis_range_to_json(r: AxisRange) -> dict[str, object]:
    obj: dict[str, object] = {"axis": r.axis, "low": r.low, "high": r.high, "origin": r.origin}
    if r.excluded:  # only then: older readers read the other ranges unchanged
        obj["excluded"] = list(r.excluded)
    if r.multiple_of:
        obj["multiple_of"] = r.multiple_of
    return obj


def spec_fields_from_json_text(text: str) -> dict[str, Any]:
    """Parse JSON text into an adapter spec's fields (``AdapterSpec(**fields)`` validates).

    Args:
        text: The JSON text.

    Returns:
        The fields, by name.

    Raises:
        AdapterSpecError: Naming the first bad field.

    Example:
        >>> spec_fields_from_json_text("[]")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        AdapterSpecError: adapter spec field 'version': expected an integer ...
    """
    if not isinstance(text, str | bytes):
        raise spec_error("spec", "JSON text", type(text).__name__)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise AdapterSpecError(
            f"adapter spec: expected JSON text, got text that does not parse ({e}). The "
            "adapter metadata is corrupt; re-export the model or pass a spec explicitly."
        ) from None
    version = read_int(obj.get("version") if isinstance(obj, dict) else None, "version")
    if version != FORMAT_VERSION:  # checked first: another version may have other fields
        raise spec_error("version", f"{FORMAT_VERSION}, the format this code reads", version)
    data = read_object(obj, "spec", _TOP_FIELDS, ("relations", "conditions"))
    parameters = tuple(
        _read_parameter(p, f"parameters[{i}]")
        for i, p in enumerate(read_list(data["parameters"], "parameters"))
    )
    return {
        "version": version,
        "parameters": parameters,
        "input_tree": TreeSpec.from_json_obj(data["input_tree"], "input_tree"),
        "inputs": _read_leaves(data["inputs"], "inputs"),
        "output_tree": TreeSpec.from_json_obj(data["output_tree"], "output_tree"),
        "outputs": _read_leaves(data["outputs"], "outputs"),
        "relations": tuple(
            _read_relation(r, f"relations[{i}]")
            for i, r in enumerate(read_list(data.get("relations", []), "relations"))
        ),
        "conditions": tuple(
            _read_condition(c, f"conditions[{i}]")
            for i, c in enumerate(read_list(data.get("conditions", []), "conditions"))
        ),
    }


def _read_condition(obj: object, where: str) -> DimCondition:
    data = read_object(obj, where, ("expression",), ("origin",))
    expression = read_str(data["expression"], f"{where}.expression")
    origin = read_str(data.get("origin", ""), f"{where}.origin", nonempty=False)
    try:
        return DimCondition(expression, origin)
    except ConditionSyntaxError as e:
        raise spec_error(
            f"{where}.expression", "one comparison of dimension sizes", str(e)
        ) from None


def _read_relation(obj: object, where: str) -> DimRelation:
    data = read_object(obj, where, ("dim", "terms", "constant"), ("origin",))
    terms = []
    for j, term in enumerate(read_list(data["terms"], f"{where}.terms")):
        pair = read_list(term, f"{where}.terms[{j}]")
        if len(pair) != 2 or type(pair[1]) is not int:
            raise spec_error(f"{where}.terms[{j}]", "[dimension name, int coefficient]", term)
        terms.append((read_str(pair[0], f"{where}.terms[{j}][0]"), pair[1]))
    constant = data["constant"]
    if type(constant) is not int:
        raise spec_error(f"{where}.constant", "an int", constant)
    origin = read_str(data.get("origin", ""), f"{where}.origin", nonempty=False)
    return DimRelation(read_str(data["dim"], f"{where}.dim"), tuple(terms), constant, origin)


def _read_parameter(obj: object, where: str) -> ParameterSpec:
    data = read_object(obj, where, ("name", "kind"), ("default",))
    name = read_str(data["name"], f"{where}.name")
    kind = read_str(data["kind"], f"{where}.kind", choices=PARAMETER_KINDS)
    has_default = "default" in data
    default = data.get("default")
    if default is not None:
        default = read_constant(default, f"{where}.default")
    return ParameterSpec(name, cast(ParameterKind, kind), has_default, default)


def _read_leaves(obj: object, where: str) -> tuple[LeafSpec, ...]:
    return tuple(_read_leaf(x, f"{where}[{i}]") for i, x in enumerate(read_list(obj, where)))


def _read_leaf(obj: object, where: str) -> LeafSpec:
    kind_obj = obj.get("kind") if isinstance(obj, dict) else None
    kind = cast(LeafKind, read_str(kind_obj, f"{where}.kind", choices=LEAF_KINDS))
    if kind == "tensor":
        data = read_object(obj, where, ("path", "kind", "tensor"))
        path = read_str(data["path"], f"{where}.path", nonempty=False)
        return LeafSpec(path, kind, tensor=_read_tensor(data["tensor"], f"{where}.tensor"))
    data = read_object(obj, where, ("path", "kind", "value"))
    path = read_str(data["path"], f"{where}.path", nonempty=False)
    return LeafSpec(path, kind, value=read_constant(data["value"], f"{where}.value"))


def _read_tensor(obj: object, where: str) -> TensorSpec:
    optional = ("made_static", "python_int", "int_range", "axis_ranges", "cast_from")
    data = read_object(obj, where, ("name", "dtype", "shape"), optional)
    shape = tuple(
        _read_dim(d, f"{where}.shape[{i}]")
        for i, d in enumerate(read_list(data["shape"], f"{where}.shape"))
    )
    made_static = tuple(
        read_int(a, f"{where}.made_static[{i}]")
        for i, a in enumerate(read_list(data.get("made_static", []), f"{where}.made_static"))
    )
    return TensorSpec(
        name=read_str(data["name"], f"{where}.name"),
        dtype=read_str(data["dtype"], f"{where}.dtype"),
        shape=shape,
        made_static=made_static,
        python_int=_read_bool(data.get("python_int", False), f"{where}.python_int"),
        int_range=_read_range(data.get("int_range"), f"{where}.int_range"),
        axis_ranges=tuple(
            _read_axis_range(r, f"{where}.axis_ranges[{i}]")
            for i, r in enumerate(read_list(data.get("axis_ranges", []), f"{where}.axis_ranges"))
        ),
        cast_from=tuple(
            read_str(d, f"{where}.cast_from[{i}]")
            for i, d in enumerate(read_list(data.get("cast_from", []), f"{where}.cast_from"))
        ),
    )


def _read_axis_range(obj: object, where: str) -> AxisRange:
    data = read_object(obj, where, ("axis", "low", "high"), ("origin", "excluded", "multiple_of"))
    low, high = (
        None if data[k] is None else read_int(data[k], f"{where}.{k}") for k in ("low", "high")
    )
    origin = read_str(data.get("origin", ""), f"{where}.origin", nonempty=False)
    excluded = tuple(
        read_int(v, f"{where}.excluded[{i}]")
        for i, v in enumerate(read_list(data.get("excluded", []), f"{where}.excluded"))
    )
    multiple = data.get("multiple_of")
    multiple_of = None if multiple is None else read_int(multiple, f"{where}.multiple_of")
    axis = read_int(data["axis"], f"{where}.axis")
    return AxisRange(axis, low, high, origin, excluded, multiple_of)


def _read_range(obj: object, where: str) -> tuple[int | None, int | None] | None:
    if obj is None:
        return None
    items = read_list(obj, where)
    if len(items) != 2:
        raise spec_error(where, "[low, high] (null for no bound)", obj)
    low, high = (
        None if b is None else read_int(b, f"{where}[{i}]", minimum=-(2**63))
        for i, b in enumerate(items)
    )
    return low, high


def _read_bool(obj: object, where: str) -> bool:
    if type(obj) is not bool:
        raise spec_error(where, "true or false", obj)
    return obj


def _read_dim(obj: object, where: str) -> Dim:
    if isinstance(obj, str) and obj:
        return obj
    return read_int(obj, where)
