"""Input steps 6 and 7: checking tensors and viewing complex tensors as real.

Split from :mod:`.input_steps` to keep modules small; both are re-exported there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._dtypes import ONNX_ELEMENT_TYPES, REAL_OF_COMPLEX, numpy_dtype, torch_dtype
from ._errors import InputDtypeError, InputShapeError, InputStructureError
from ._mismatch import describe_value
from ._spec import AxisRange, Dim, DimCondition, DimRelation, LeafSpec, TensorSpec
from ._torch import torch_module

__all__ = ["CheckTensors", "ComplexToRealView", "complex_to_real", "real_to_complex"]


@dataclass(frozen=True)
class _Expected:
    """What one tensor input must look like, precomputed for fast checks."""

    path: str
    dtype: str
    np_dtype: np.dtype[Any] | None
    shape: tuple[Dim, ...]
    static_shape: tuple[int, ...] | None  # the whole shape when no axis is symbolic
    static: tuple[tuple[int, int], ...]  # (axis, size)
    symbolic: tuple[tuple[int, str], ...]  # (axis, name)
    made_static: tuple[int, ...] = ()  # asked dynamic, fixed by the model's code
    ranges: tuple[AxisRange, ...] = ()  # bounded dynamic axes
    cast_from: tuple[str, ...] = ()  # also taken, cast on the way in


def _expected(path: str, tensor: TensorSpec) -> _Expected:
    shape = tensor.shape
    static = tuple((a, d) for a, d in enumerate(shape) if isinstance(d, int))
    symbolic = tuple((a, d) for a, d in enumerate(shape) if isinstance(d, str))
    return _Expected(
        path=path,
        dtype=tensor.dtype,
        np_dtype=numpy_dtype(tensor.dtype),
        shape=shape,
        static_shape=None if symbolic else tuple(d for _, d in static),
        static=static,
        symbolic=symbolic,
        made_static=tensor.made_static,
        ranges=tensor.axis_ranges,
        cast_from=tensor.cast_from,
    )


def _tensor_of(leaf: LeafSpec) -> TensorSpec:
    if leaf.tensor is None:
        raise ValueError(f"{leaf.path}: expected a tensor leaf spec, got a {leaf.kind} leaf")
    return leaf.tensor


_NDARRAY = np.ndarray


class CheckTensors:
    """Step 6: check each tensor's type, dtype, rank, static dims and symbolic dims.

    A symbolic dimension name (``"batch"``) must have one size across all inputs of a call.

    Args:
        tensors: The tensor leaf specs, in graph order.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import LeafSpec, TensorSpec
        >>> step = CheckTensors([LeafSpec("x", "tensor", TensorSpec("x", "float32", ("n", 2)))])
        >>> step([np.zeros((5, 2), np.float32)])
        >>> try:
        ...     step([np.zeros((5, 2))])
        ... except Exception as e:
        ...     print(e)  # doctest: +ELLIPSIS
        x: expected dtype float32, got float64. ...
    """

    def __init__(
        self,
        tensors: Sequence[LeafSpec],
        relations: Sequence[DimRelation] = (),
        conditions: Sequence[DimCondition] = (),
    ) -> None:
        self._expected = tuple(_expected(leaf.path, _tensor_of(leaf)) for leaf in tensors)
        self._relations = tuple(relations)
        self._conditions = tuple(conditions)
        self._plan = tuple((e, e.np_dtype, e.static_shape) for e in self._expected)
        self._torch_dtypes: dict[str, object] = {}

    def __call__(self, tensors: Sequence[object]) -> None:
        """Raise ``InputDtypeError``/``InputShapeError``/``InputStructureError`` on a mismatch."""
        dims: dict[str, tuple[int, str, int]] = {}
        for value, (exp, np_dtype, static_shape) in zip(tensors, self._plan):  # noqa: B905  # same length; strict= is slow
            if type(value) is not _NDARRAY or value.dtype is not np_dtype:
                self._check_type_and_dtype(value, exp)
            shape = value.shape  # type: ignore[attr-defined]  # an ndarray or a torch.Tensor
            if static_shape is None:
                _check_dims(exp, tuple(shape), dims)
            elif shape != static_shape:
                raise _static_shape_error(exp, tuple(shape))
        for relation in self._relations:
            _check_relation(relation, dims)
        if self._conditions:
            sizes = {name: size for name, (size, _, _) in dims.items()}
            for condition in self._conditions:
                if condition.holds(sizes) is False:
                    raise _condition_error(condition, dims)

    def _check_type_and_dtype(self, value: object, exp: _Expected) -> None:
        """Check a value that is not an ndarray of the very dtype object expected."""
        if isinstance(value, np.ndarray):
            # np.dtype(None) is float64, so compare names when numpy has no dtype for the spec's.
            wrong = (
                value.dtype.name != exp.dtype
                if exp.np_dtype is None
                else value.dtype != exp.np_dtype
            )
            if wrong:
                raise self._dtype_error(exp, value.dtype)
            return
        self._check_torch(value, exp)

    def _check_torch(self, value: object, exp: _Expected) -> None:
        torch = torch_module()
        if torch is None or not isinstance(value, torch.Tensor):
            raise InputStructureError(
                f"{exp.path}: expected a tensor (numpy.ndarray or torch.Tensor) of dtype "
                f"{exp.dtype} and shape {exp.shape}, got {describe_value(value)}. Pass an array, "
                f"e.g. {_array_hint(exp.dtype)}."
            )
        expected = self._torch_dtypes.get(exp.dtype)
        if expected is None:
            expected = self._torch_dtypes[exp.dtype] = torch_dtype(exp.dtype)
        if value.dtype is not expected:
            raise self._dtype_error(exp, value.dtype)

    @staticmethod
    def _dtype_error(exp: _Expected, got: object) -> InputDtypeError:
        got_name = str(got).removeprefix("torch.")
        also = f" (or {', '.join(exp.cast_from)}, cast on the way in)" if exp.cast_from else ""
        return InputDtypeError(
            f"{exp.path}: expected dtype {exp.dtype}{also}, got {got_name}. Cast the input, e.g. "
            f"{_cast_hint(exp.dtype)}, or re-export with {got_name} inputs."
        )


def _numpy_spelling(dtype: str) -> str | None:
    """How numpy code names ``dtype`` (``ml_dtypes.bfloat16`` when installed), or ``None``."""
    if dtype not in ONNX_ELEMENT_TYPES:
        return f"numpy.{dtype}"
    return f"ml_dtypes.{dtype}" if numpy_dtype(dtype) is not None else None


def _cast_hint(dtype: str) -> str:
    """Valid code that casts ``x`` (numpy and torch) to ``dtype``."""
    numpy_name = _numpy_spelling(dtype)
    if numpy_name is None:
        return (
            f"x.to(torch.{dtype}) (numpy has no {dtype}; pip install ml_dtypes to pass numpy "
            f"arrays of it)"
        )
    return f"x.astype({numpy_name}) or x.to(torch.{dtype})"


def _array_hint(dtype: str) -> str:
    numpy_name = _numpy_spelling(dtype)
    if numpy_name is None:
        return f"torch.as_tensor(value).to(torch.{dtype})"
    return f"numpy.asarray(value, dtype={numpy_name})"


def _static_shape_error(exp: _Expected, shape: tuple[int, ...]) -> InputShapeError:
    if len(shape) != len(exp.shape):
        return _rank_error(exp, shape)
    axis = next(a for a, d in exp.static if shape[a] != d)
    head = (
        f"{exp.path}: expected size {exp.shape[axis]} at axis {axis} (shape {exp.shape}), got "
        f"shape {shape}."
    )
    if axis in exp.made_static:
        return InputShapeError(
            f"{head} That axis was asked to be dynamic, but the model's code fixes its size, "
            "so the export made it static (allow_static_fallback=True; its warning named the "
            "line). Pass that size, or change the model's code so the size follows the input "
            "and export again."
        )
    return InputShapeError(
        f"{head} That axis is static in the exported model; pass that size, or re-export with "
        "a dynamic dimension there."
    )


def _rank_error(exp: _Expected, shape: tuple[int, ...]) -> InputShapeError:
    return InputShapeError(
        f"{exp.path}: expected rank {len(exp.shape)} (shape {exp.shape}), got rank {len(shape)} "
        f"(shape {shape}). Reshape the input to the exported rank."
    )


def _check_dims(
    exp: _Expected, shape: tuple[int, ...], dims: dict[str, tuple[int, str, int]]
) -> None:
    if len(shape) != len(exp.shape):
        raise _rank_error(exp, shape)
    for axis, size in exp.static:
        if shape[axis] != size:
            raise _static_shape_error(exp, shape)
    for axis, name in exp.symbolic:
        seen = dims.setdefault(name, (shape[axis], exp.path, axis))
        if seen[0] != shape[axis]:
            raise InputShapeError(
                f"{exp.path}: expected dimension {name!r} (axis {axis}) to be {seen[0]} as in "
                f"{seen[1]} (axis {seen[2]}), got {shape[axis]} (shape {shape}). Inputs sharing "
                "a dimension name must agree on its size."
            )
        formula = _formula(name)
        if formula is not None:
            _check_formula(exp, shape, axis, name, formula, dims)
    for bounds in exp.ranges:
        if not bounds.holds(shape[bounds.axis]):
            raise _range_error(exp, shape, bounds)


#: A derived dimension's name, as torch writes ``2 * Dim("h") + 1``: ``2*h + 1``.
_FORMULA = re.compile(r"^(?:(\d+)\*)?([A-Za-z_][\w.]*)(?: ([+-]) (\d+))?$")


def _formula(name: str) -> tuple[int, str, int] | None:
    """``(scale, root, shift)`` of a derived dimension's name (``2*h + 1``), else ``None``."""
    if "*" not in name and " + " not in name and " - " not in name:
        return None
    found = _FORMULA.match(name)
    if found is None:
        return None
    scale, root, sign, shift = found.groups()
    offset = int(shift or 0) * (-1 if sign == "-" else 1)
    return int(scale or 1), root, offset


def _check_formula(
    exp: _Expected,
    shape: tuple[int, ...],
    axis: int,
    name: str,
    formula: tuple[int, str, int],
    dims: dict[str, tuple[int, str, int]],
) -> None:
    """A derived axis (``2*h``) takes only the sizes its formula gives, one ``h`` per call."""
    scale, root, shift = formula
    size = shape[axis]
    value, rest = divmod(size - shift, scale)
    if rest or value < 0:
        raise InputShapeError(
            f"{exp.path}: expected dimension {name!r} (axis {axis}) to be {name} for a whole "
            f"{root} >= 0, got {size} (shape {shape}). The export tied this axis to {root} by "
            f"that formula; pass a size it gives (e.g. {scale * max(value, 0) + shift} or "
            f"{scale * (max(value, 0) + 1) + shift}), or re-export without the formula."
        )
    seen = dims.setdefault(root, (value, exp.path, axis))
    if seen[0] != value:
        raise InputShapeError(
            f"{exp.path}: expected dimension {name!r} (axis {axis}) to agree with {root} = "
            f"{seen[0]} as in {seen[1]} (axis {seen[2]}), got {size}, which gives {root} = "
            f"{value} (shape {shape}). Axes tied to one dimension must agree on its size."
        )


def _check_relation(relation: DimRelation, dims: dict[str, tuple[int, str, int]]) -> None:
    """A dimension the model ties to others (``c = 32 - t``) has the size the others give."""
    seen = dims.get(relation.dim)
    expected = relation.value({name: size for name, (size, _, _) in dims.items()})
    if seen is None or expected is None or seen[0] == expected:
        return
    size, path, axis = seen
    given = ", ".join(
        f"{name} = {dims[name][0]} ({dims[name][1]} axis {dims[name][2]})"
        for name, _ in relation.terms
    )
    origin = f" ({relation.origin})" if relation.origin else ""
    raise InputShapeError(
        f"{path}: expected dimension {relation.dim!r} (axis {axis}) to be {relation.formula()} "
        f"= {expected} for {given}, got {size}. The exported model ties these dimensions: "
        f"{relation.text()}{origin}; pass sizes that keep it (e.g. {relation.dim} = "
        f"{expected}), or change the model so the sizes are independent and export again."
    )


def _condition_error(
    condition: DimCondition, dims: dict[str, tuple[int, str, int]]
) -> InputShapeError:
    """A call whose sizes break a comparison the file holds only under."""
    given = ", ".join(
        f"{name} = {dims[name][0]} ({dims[name][1]} axis {dims[name][2]})"
        for name in condition.names
        if name in dims
    )
    origin = condition.origin or "the model's code"
    return InputShapeError(
        f"expected dimensions where {condition.expression}, got {given}. The exported model "
        f"holds only under this condition: {origin} compared these sizes when the model "
        "was captured, and the file has only the branch the example took. Pass "
        "sizes that keep it, or export again with an example on the branch you need (or "
        "that branch written with torch.cond to keep both)."
    )


def _range_error(exp: _Expected, shape: tuple[int, ...], bounds: AxisRange) -> InputShapeError:
    name = exp.shape[bounds.axis]
    origin = f", set by {bounds.origin}" if bounds.origin else ""
    return InputShapeError(
        f"{exp.path}: expected dimension {name!r} (axis {bounds.axis}) in {bounds.text()}, the "
        f"sizes the exported model holds for{origin}; got {shape[bounds.axis]} (shape "
        f"{shape}). Pass a size in that range, or re-export with an example (and bounds) "
        "that cover the size you need."
    )


class ComplexToRealView:
    """Step 7: complex tensors become their real view: float dtype, trailing axis of 2.

    Args:
        tensors: The tensor leaf specs, in graph order.

    Attributes:
        is_identity: True when no input is complex; the adapter then skips this step.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import LeafSpec, TensorSpec
        >>> step = ComplexToRealView([LeafSpec("z", "tensor", TensorSpec("z", "complex64", (2,)))])
        >>> step([np.array([1 + 2j, 3j], np.complex64)])[0]
        array([[1., 2.],
               [0., 3.]], dtype=float32)
    """

    def __init__(self, tensors: Sequence[LeafSpec]) -> None:
        self._complex = tuple(
            i
            for i, leaf in enumerate(tensors)
            if leaf.tensor and leaf.tensor.dtype in REAL_OF_COMPLEX
        )
        self.is_identity = not self._complex

    def __call__(self, tensors: list[object]) -> list[object]:
        """Return the tensors, complex ones replaced by their real view."""
        if not self._complex:
            return tensors
        out = list(tensors)
        for i in self._complex:
            out[i] = complex_to_real(out[i])
        return out


def complex_to_real(value: object) -> object:
    """View a complex array/tensor as real with a trailing axis of 2 (a copy if not contiguous).

    Example:
        >>> complex_to_real(np.array(1 + 2j, np.complex64)).tolist()
        [1.0, 2.0]
    """
    if isinstance(value, np.ndarray):
        real = np.dtype(REAL_OF_COMPLEX[value.dtype.name])
        return np.ascontiguousarray(value).reshape(-1).view(real).reshape(*value.shape, 2)
    return _torch_or_fail(value).view_as_real(value.resolve_conj())  # type: ignore[attr-defined]  # a torch.Tensor


def real_to_complex(value: object, dtype: str) -> object:
    """Turn a real view (trailing axis of 2) back into a complex array/tensor of ``dtype``.

    Example:
        >>> real_to_complex(np.array([[1.0, 2.0]], np.float32), "complex64")
        array([1.+2.j], dtype=complex64)
    """
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value).view(np.dtype(dtype)).reshape(value.shape[:-1])
    return _torch_or_fail(value).view_as_complex(value.contiguous())  # type: ignore[attr-defined]  # a torch.Tensor


def _torch_or_fail(value: object) -> Any:
    torch = torch_module()
    if torch is None or not isinstance(value, torch.Tensor):
        raise TypeError(f"expected a numpy.ndarray or torch.Tensor, got {describe_value(value)}")
    return torch
