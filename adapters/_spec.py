"""The adapter spec: pure data that travels in a model's ``metadata_props`` as JSON.

An :class:`AdapterSpec` records ``forward``'s parameters, the structure of the canonical
inputs and of the outputs, and one :class:`LeafSpec` per leaf: a tensor (its ONNX graph name,
dtype and shape) or a constant (its value). Constructing a spec validates it; every problem is
an :class:`~adapters.AdapterSpecError` naming the field, e.g. ``inputs[2].tensor.dtype``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._dim_conditions import ConditionSyntaxError, DimCondition
from ._dtypes import DTYPE_NAMES
from ._json import Constant, is_constant, spec_error
from ._spec_json import spec_fields_from_json_text, spec_to_json_obj
from ._spec_parts import (
    FORMAT_VERSION,
    METADATA_KEY,
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

__all__ = [
    "FORMAT_VERSION",
    "METADATA_KEY",
    "ParameterKind",
    "LeafKind",
    "Dim",
    "AxisRange",
    "DimRelation",
    "DimCondition",
    "TensorSpec",
    "LeafSpec",
    "ParameterSpec",
    "AdapterSpec",
]


@dataclass(frozen=True)
class AdapterSpec:
    """Everything the adapters need to call an ONNX model like the PyTorch model.

    The input tree is always ``(args, kwargs)``: the canonical form of
    :func:`~adapters.canonicalize_inputs`, a tuple of a tuple and a dict.

    Attributes:
        version: The format version, :data:`FORMAT_VERSION`.
        parameters: ``forward``'s parameters in signature order.
        input_tree: Structure of the canonical ``(args, kwargs)``.
        inputs: One leaf spec per leaf of ``input_tree``.
        output_tree: Structure of the outputs.
        outputs: One leaf spec per leaf of ``output_tree``.
        relations: Dynamic dimensions the model ties to others (``c = 32 - t``), checked
            on each call.
        conditions: Comparisons of dynamic dimensions the file holds only under
            (``total >= past + seq``: the branch the example took), checked on each call.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import build_adapter_spec
        >>> spec = build_adapter_spec(None, (np.zeros(2, np.float32),), {}, np.zeros(2))
        >>> AdapterSpec.from_json(spec.to_json()) == spec
        True
    """

    version: int
    parameters: tuple[ParameterSpec, ...]
    input_tree: TreeSpec
    inputs: tuple[LeafSpec, ...]
    output_tree: TreeSpec
    outputs: tuple[LeafSpec, ...]
    relations: tuple[DimRelation, ...] = ()
    conditions: tuple[DimCondition, ...] = ()

    def __post_init__(self) -> None:
        _check_adapter_spec(self)

    def to_json(self) -> str:
        """Serialise to compact JSON text, the inverse of :meth:`from_json`.

        Returns:
            The JSON text.

        Example:
            >>> import numpy as np
            >>> from onnx_export.adapters import build_adapter_spec
            >>> spec = build_adapter_spec(None, (np.zeros(2, np.float32),), {}, 1)
            >>> spec.to_json()[:12]
            '{"version":1'
        """
        return json.dumps(spec_to_json_obj(self), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> AdapterSpec:
        """Parse and strictly validate JSON written by :meth:`to_json`.

        Nothing in the text is imported or executed.

        Args:
            text: The JSON text, e.g. from a model's ``metadata_props``.

        Returns:
            The spec.

        Raises:
            AdapterSpecError: Not JSON, another version, an unknown kind, a wrong type, or
                inconsistent counts; the message names the field.

        Example:
            >>> from onnx_export.adapters import AdapterSpecError
            >>> try:
            ...     AdapterSpec.from_json('{"version": 99}')
            ... except AdapterSpecError as e:
            ...     print(str(e)[:50])
            adapter spec field 'version': expected 1, the form
        """
        fields: dict[str, Any] = spec_fields_from_json_text(text)
        return cls(**fields)


def check_constant(value: object, where: str) -> Constant:
    """Return ``value`` if it is a constant (bool, int, finite float, str), else raise.

    Example:
        >>> check_constant("mean", "reduction")
        'mean'
    """
    if not is_constant(value):
        raise spec_error(where, "a bool, int, finite float or string", value)
    return value  # type: ignore[return-value]  # is_constant checked the type


def check_tensor_spec(tensor: TensorSpec, where: str) -> None:
    """Validate one tensor spec; errors name ``where.name``, ``where.dtype``, ``where.shape``.

    Example:
        >>> check_tensor_spec(TensorSpec("x", "float32", (2, "n")), "inputs[0].tensor")
    """
    if not isinstance(tensor.name, str) or not tensor.name:
        raise spec_error(f"{where}.name", "a non-empty graph name", tensor.name)
    if tensor.dtype not in DTYPE_NAMES:
        raise spec_error(f"{where}.dtype", f"one of {', '.join(DTYPE_NAMES)}", tensor.dtype)
    if not isinstance(tensor.shape, tuple):
        raise spec_error(f"{where}.shape", "a tuple of dimensions", tensor.shape)
    for axis, dim in enumerate(tensor.shape):
        ok_int = type(dim) is int and dim >= 0
        if not ok_int and not (isinstance(dim, str) and dim):
            raise spec_error(
                f"{where}.shape[{axis}]", "an int >= 0 or a symbolic dimension name", dim
            )
    if type(tensor.python_int) is not bool:
        raise spec_error(f"{where}.python_int", "a bool", tensor.python_int)
    if tensor.python_int and (tensor.dtype != "int64" or tensor.shape != ()):
        raise spec_error(
            f"{where}",
            "dtype int64 and shape () for a Python int input",
            f"dtype {tensor.dtype}, shape {tensor.shape}",
        )
    if tensor.int_range is not None:
        _check_int_range(tensor, f"{where}.int_range")
    for i, bounds in enumerate(tensor.axis_ranges):
        _check_axis_range(tensor, bounds, f"{where}.axis_ranges[{i}]")
    _check_cast_from(tensor, f"{where}.cast_from")


def _check_relation(relation: DimRelation, where: str) -> None:
    if not isinstance(relation, DimRelation):
        raise spec_error(where, "a DimRelation", relation)
    if not isinstance(relation.dim, str) or not relation.dim:
        raise spec_error(f"{where}.dim", "a dimension name", relation.dim)
    if type(relation.constant) is not int or not isinstance(relation.origin, str):
        raise spec_error(where, "an int constant and a str origin", relation)
    for j, term in enumerate(relation.terms):
        ok = isinstance(term, tuple) and len(term) == 2
        if not ok or not isinstance(term[0], str) or type(term[1]) is not int:
            raise spec_error(f"{where}.terms[{j}]", "(dimension name, int coefficient)", term)


def _check_axis_range(tensor: TensorSpec, bounds: AxisRange, where: str) -> None:
    if not isinstance(bounds, AxisRange):
        raise spec_error(where, "an AxisRange", bounds)
    rank = len(tensor.shape)
    if type(bounds.axis) is not int or not 0 <= bounds.axis < rank:
        raise spec_error(f"{where}.axis", f"an axis of the input, 0 to {rank - 1}", bounds.axis)
    if not isinstance(tensor.shape[bounds.axis], str):
        raise spec_error(f"{where}.axis", "a symbolic (dynamic) axis", bounds.axis)
    ends = (bounds.low, bounds.high)
    if not all(b is None or (type(b) is int and b >= 0) for b in ends):
        raise spec_error(where, "low and high as ints >= 0 or None", ends)
    if bounds.low is not None and bounds.high is not None and bounds.low > bounds.high:
        raise spec_error(where, "low <= high", ends)
    if not isinstance(bounds.origin, str):
        raise spec_error(f"{where}.origin", "a str", bounds.origin)
    _check_axis_conditions(bounds, where)


def _check_axis_conditions(bounds: AxisRange, where: str) -> None:
    """``excluded``: a tuple of ints >= 0; ``multiple_of``: an int >= 2 or ``None``."""
    excluded = bounds.excluded
    if not isinstance(excluded, tuple) or not all(type(v) is int and v >= 0 for v in excluded):
        raise spec_error(f"{where}.excluded", "a tuple of ints >= 0", excluded)
    multiple = bounds.multiple_of
    if multiple is not None and not (type(multiple) is int and multiple >= 2):
        raise spec_error(f"{where}.multiple_of", "an int >= 2 or None", multiple)


def _check_cast_from(tensor: TensorSpec, where: str) -> None:
    """``cast_from``: a tuple of float dtypes other than the tensor's own (float tensors only)."""
    if not isinstance(tensor.cast_from, tuple):
        raise spec_error(where, "a tuple of dtype names", tensor.cast_from)
    floats = ("float16", "bfloat16", "float32", "float64")
    for i, name in enumerate(tensor.cast_from):
        if name not in floats or name == tensor.dtype or tensor.dtype not in floats:
            raise spec_error(
                f"{where}[{i}]",
                f"a float dtype other than {tensor.dtype} (of a float tensor)",
                name,
            )


def _check_int_range(tensor: TensorSpec, where: str) -> None:
    bounds = tensor.int_range
    ok = (
        tensor.python_int
        and isinstance(bounds, tuple)
        and len(bounds) == 2
        and all(b is None or type(b) is int for b in bounds)
    )
    if not ok:
        raise spec_error(where, "(low, high) of ints or None, on a Python int input", bounds)
    low, high = bounds  # type: ignore[misc]  # checked above: a pair
    if low is not None and high is not None and low > high:
        raise spec_error(where, "low <= high", bounds)


def _check_adapter_spec(spec: AdapterSpec) -> None:
    """Validate a whole spec; the first problem raises, naming its field."""
    if type(spec.version) is not int or spec.version != FORMAT_VERSION:
        raise spec_error(
            "version",
            f"{FORMAT_VERSION} (this onnx-export reads format {FORMAT_VERSION})",
            spec.version,
        )
    _check_parameters(spec.parameters)
    _check_input_tree(spec.input_tree, spec.parameters)
    for i, relation in enumerate(spec.relations):
        _check_relation(relation, f"relations[{i}]")
    for i, condition in enumerate(spec.conditions):
        _check_condition(condition, f"conditions[{i}]")
    for name, tree, leaves in (
        ("inputs", spec.input_tree, spec.inputs),
        ("outputs", spec.output_tree, spec.outputs),
    ):
        if not isinstance(leaves, tuple) or len(leaves) != tree.num_leaves:
            count = len(leaves) if isinstance(leaves, tuple) else leaves
            raise spec_error(name, f"{tree.num_leaves} leaf specs (one per tree leaf)", count)
        _check_leaves(leaves, name)


def _check_condition(condition: object, where: str) -> None:
    if not isinstance(condition, DimCondition):
        raise spec_error(where, "a DimCondition", condition)
    if not isinstance(condition.origin, str):
        raise spec_error(f"{where}.origin", "a str", condition.origin)
    try:
        condition.names  # noqa: B018  # parses the expression
    except ConditionSyntaxError as e:
        raise spec_error(
            f"{where}.expression", "one comparison of dimension sizes", str(e)
        ) from None


def _check_parameters(parameters: tuple[ParameterSpec, ...]) -> None:
    seen: set[str] = set()
    last_rank = 0
    positional_default = False
    for i, p in enumerate(parameters):
        where = f"parameters[{i}]"
        if not isinstance(p, ParameterSpec):
            raise spec_error(where, "a ParameterSpec", p)
        if not p.name.isidentifier() or p.name in seen:
            raise spec_error(f"{where}.name", "a unique Python identifier", p.name)
        seen.add(p.name)
        if p.kind not in PARAMETER_KINDS:
            raise spec_error(f"{where}.kind", f"one of {', '.join(PARAMETER_KINDS)}", p.kind)
        rank = PARAMETER_KINDS.index(p.kind)
        if rank < last_rank or (rank == last_rank and p.kind.startswith("var_")):
            raise spec_error(f"{where}.kind", "kinds in Python's signature order", p.kind)
        last_rank = rank
        if p.has_default and (p.kind.startswith("var_") or not _is_default(p.default)):
            raise spec_error(f"{where}.default", "no default (var) or a constant/None", p.default)
        if p.kind in ("positional_only", "positional_or_keyword"):
            if positional_default and not p.has_default:
                raise spec_error(where, "a default (it follows a parameter with one)", p.name)
            positional_default = positional_default or p.has_default


def _is_default(value: object) -> bool:
    return value is None or is_constant(value)


def _check_input_tree(tree: TreeSpec, parameters: tuple[ParameterSpec, ...]) -> None:
    """The input tree is ``(args, kwargs)`` and fits the parameters."""
    if not isinstance(tree, TreeSpec):
        raise spec_error("input_tree", "a TreeSpec", tree)
    kinds = tuple(c.kind for c in tree.children)
    if tree.kind != "tuple" or kinds != ("tuple", "dict"):
        raise spec_error("input_tree", "a tuple (args tuple, kwargs dict)", repr(tree)[:60])
    by_kind = {p.kind for p in parameters}
    positional = sum(p.kind in ("positional_only", "positional_or_keyword") for p in parameters)
    n_args = len(tree.children[0].children)
    if "var_positional" not in by_kind and n_args > positional:
        raise spec_error("input_tree.children[0]", f"at most {positional} arguments", n_args)
    keywords = {p.name for p in parameters if p.kind in ("positional_or_keyword", "keyword_only")}
    for i, key in enumerate(tree.children[1].keys):
        ok = isinstance(key, str) and (key in keywords or "var_keyword" in by_kind)
        if not ok:
            raise spec_error(f"input_tree.children[1].keys[{i}]", "a parameter name", key)


def _check_leaves(leaves: tuple[LeafSpec, ...], name: str) -> None:
    names: set[str] = set()
    for i, leaf in enumerate(leaves):
        where = f"{name}[{i}]"
        if not isinstance(leaf, LeafSpec):
            raise spec_error(where, "a LeafSpec", leaf)
        if not isinstance(leaf.path, str):
            raise spec_error(f"{where}.path", "a display path string", leaf.path)
        if leaf.kind == "tensor":
            if leaf.value is not None:
                raise spec_error(f"{where}.value", "no value for a tensor leaf", leaf.value)
            tensor = leaf.tensor
            if not isinstance(tensor, TensorSpec):
                raise spec_error(f"{where}.tensor", "a TensorSpec for a tensor leaf", tensor)
            check_tensor_spec(tensor, f"{where}.tensor")
            if tensor.name in names:
                raise spec_error(f"{where}.tensor.name", f"a name unique in {name}", tensor.name)
            names.add(tensor.name)
        elif leaf.kind == "constant":
            if leaf.tensor is not None:
                raise spec_error(f"{where}.tensor", "no tensor for a constant leaf", leaf.tensor)
            check_constant(leaf.value, f"{where}.value")
        else:
            raise spec_error(f"{where}.kind", "tensor or constant", leaf.kind)
