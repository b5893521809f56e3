"""The parts of an adapter spec: tensors, leaves and ``forward``'s parameters, as pure data.

:class:`~adapters.AdapterSpec` (``_spec.py``) is made of these; its JSON form
(``_spec_json.py``) reads and writes them. Neither of those two imports the other's module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from ._json import Constant

__all__ = [
    "FORMAT_VERSION",
    "METADATA_KEY",
    "ParameterKind",
    "LeafKind",
    "Dim",
    "PARAMETER_KINDS",
    "LEAF_KINDS",
    "AxisRange",
    "DimRelation",
    "TensorSpec",
    "LeafSpec",
    "ParameterSpec",
]

FORMAT_VERSION = 1
"""Version of the JSON format written by :meth:`AdapterSpec.to_json`."""

METADATA_KEY = "onnx_export.adapter_spec"
"""Key of the adapter spec in ``ModelProto.metadata_props``."""

ParameterKind: TypeAlias = Literal[
    "positional_only", "positional_or_keyword", "var_positional", "keyword_only", "var_keyword"
]
"""Parameter kinds, in the order Python requires them in a signature."""

LeafKind: TypeAlias = Literal["tensor", "constant"]
"""What a leaf is: an ONNX graph input/output, or a constant recorded in the spec."""

Dim: TypeAlias = int | str
"""A dimension: an int for a static size, a str naming a symbolic size."""

PARAMETER_KINDS: tuple[str, ...] = get_args(ParameterKind)
LEAF_KINDS: tuple[str, ...] = get_args(LeafKind)


@dataclass(frozen=True)
class AxisRange:
    """The sizes a dynamic axis of an input may take, and who set them.

    Attributes:
        axis: The axis of the input.
        low: The smallest size the file holds for, or ``None`` for no bound.
        high: The largest size, or ``None`` for no bound.
        origin: Who set the range, for messages: the user's ``Dim`` bounds
            (``"Dim('batch', min=3, max=8) in dynamic_shapes"``) or a guard in the model's
            code (``"the model's code at model.py:12 (if x.shape[0] > 2:)"``).
        excluded: Sizes inside ``[low, high]`` the file does not hold for: a branch of the
            model's code on that size was not traced (``if x.shape[0] == 4:`` exported at
            batch 3 excludes 4).
        multiple_of: The file holds only for multiples of this (``if x.shape[1] % 4 == 0``
            exported at 8), or ``None``.

    Example:
        >>> r = AxisRange(0, 3, None, "the model's code at model.py:12")
        >>> r.text()
        '[3, inf)'
        >>> r.holds(2)
        False
        >>> AxisRange(0, None, None, "", excluded=(1,)).text()
        'any size but 1'
        >>> AxisRange(1, None, None, "", multiple_of=4).holds(6)
        False
    """

    axis: int
    low: int | None
    high: int | None
    origin: str = ""
    excluded: tuple[int, ...] = ()
    multiple_of: int | None = None

    def holds(self, size: int) -> bool:
        """Whether ``size`` is inside the range (and not excluded, and a multiple)."""
        low_ok = self.low is None or size >= self.low
        if self.excluded and size in self.excluded:
            return False
        if self.multiple_of and size % self.multiple_of:
            return False
        return low_ok and (self.high is None or size <= self.high)

    def text(self) -> str:
        """The range as ``[low, high]``, with ``inf`` where unbounded (and what it leaves out)."""
        low = 0 if self.low is None else self.low
        text = f"[{low}, inf)" if self.high is None else f"[{low}, {self.high}]"
        parts = [] if self.low is None and self.high is None else [text]
        if self.multiple_of:
            parts.append(f"multiples of {self.multiple_of}")
        if self.excluded:
            parts.append("any size but " + ", ".join(map(str, self.excluded)))
        return ", ".join(parts) or text


@dataclass(frozen=True)
class DimRelation:
    """A dynamic dimension the model ties to others: ``dim = constant + sum(coef * other)``.

    torch.export finds such a relation when the model's code needs it (``cat([tokens,
    cache], 1)`` feeding ``Linear(32, ...)`` ties ``cache = 32 - tokens``); the adapter
    refuses, with an ``InputShapeError`` naming the relation, a call whose sizes break it.

    Attributes:
        dim: The dependent dimension's name, as the input shapes write it (``"c"``).
        terms: ``(name, coefficient)`` of each dimension it depends on (``(("t", -1),)``).
        constant: The constant term.
        origin: Who found it, for messages.

    Example:
        >>> r = DimRelation("c", (("t", -1),), 32)
        >>> r.text(), r.value({"t": 12})
        ('c = 32 - t', 20)
    """

    dim: str
    terms: tuple[tuple[str, int], ...]
    constant: int = 0
    origin: str = ""

    def formula(self) -> str:
        """The right-hand side, e.g. ``"32 - t"`` or ``"2*t + 1"``."""
        parts: list[str] = []
        for name, coef in self.terms:
            size = abs(coef)
            term = name if size == 1 else f"{size}*{name}"
            if not parts:
                parts.append(f"-{term}" if coef < 0 else term)
            else:
                parts.append(f"- {term}" if coef < 0 else f"+ {term}")
        if self.constant and parts and parts[0].startswith("-"):
            parts[0] = f"- {parts[0][1:]}"
            return f"{self.constant} " + " ".join(parts)
        if self.constant:
            sign = "-" if self.constant < 0 else "+"
            parts.append(f"{sign} {abs(self.constant)}")
        return " ".join(parts) if parts else str(self.constant)

    def text(self) -> str:
        """The relation, e.g. ``"c = 32 - t"``."""
        return f"{self.dim} = {self.formula()}"

    def value(self, sizes: dict[str, int]) -> int | None:
        """The size the relation gives ``dim``, or ``None`` when a term's size is unknown."""
        if any(name not in sizes for name, _ in self.terms):
            return None
        return self.constant + sum(coef * sizes[name] for name, coef in self.terms)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor that crosses the ONNX boundary.

    Attributes:
        name: The ONNX graph input or output name.
        dtype: numpy-style dtype name: ``"float32"``, ``"int64"``, ``"bool"``, ``"complex64"``,
            ``"bfloat16"``... A complex tensor's ONNX value is its real view (float dtype,
            shape + ``(2,)``).
        shape: One entry per axis: an int for a static size, a str for a symbolic one.
        made_static: Axes (of an input) that were asked to be dynamic but were exported
            static because the model's code fixes their size
            (``ExportOptions(allow_static_fallback=True)``); shape errors say so.
        python_int: The input is a Python ``int`` marked dynamic (a SymInt at export):
            the caller passes an int, the adapter feeds it as a 0-d ``int64`` array.
            Such a spec has dtype ``"int64"`` and shape ``()``.
        int_range: For such an int, the values the exported program holds for, ``(low,
            high)`` with ``None`` for no bound; the adapter refuses others.
        axis_ranges: The bounded dynamic axes of an input: the sizes each holds for (from
            the user's ``Dim`` bounds or a guard in the model's code); the adapter refuses
            others with an ``InputShapeError`` that names the range and who set it.
        cast_from: Other dtypes the caller may pass for this input, cast to ``dtype`` when
            the model is called (a half-precision export, ``ExportOptions(dtype=...)``,
            takes float32 inputs too); any other dtype is still refused.

    Example:
        >>> TensorSpec("input_ids", "int64", ("batch", 16)).shape
        ('batch', 16)
        >>> TensorSpec("n", "int64", (), python_int=True, int_range=(2, None)).int_range
        (2, None)
        >>> TensorSpec("x", "float32", ("batch", 4), axis_ranges=(AxisRange(0, 3, 8),)).shape
        ('batch', 4)
        >>> TensorSpec("x", "float16", ("n",), cast_from=("float32",)).cast_from
        ('float32',)
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    made_static: tuple[int, ...] = ()
    python_int: bool = False
    int_range: tuple[int | None, int | None] | None = None
    axis_ranges: tuple[AxisRange, ...] = ()
    cast_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeafSpec:
    """One leaf of the inputs or outputs, in flattening order.

    Attributes:
        path: Display path, e.g. ``"past_key_values[1][0]"``; used in messages only.
        kind: ``"tensor"`` or ``"constant"``.
        tensor: The tensor spec (tensors only).
        value: The recorded value (constants only): bool, int, finite float or str.

    Example:
        >>> LeafSpec("scale", "constant", value=2.0).value
        2.0
    """

    path: str
    kind: LeafKind
    tensor: TensorSpec | None = None
    value: Constant | None = None


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter of the exported ``forward``.

    Attributes:
        name: The parameter name.
        kind: Its kind (``inspect.Parameter`` kinds, in snake case).
        has_default: Whether a default is recorded. Defaults that are not JSON constants
            (tensors, objects) are not recorded; such parameters must be passed at run time.
        default: The default (``None`` or a constant) when ``has_default``.

    Example:
        >>> ParameterSpec("scale", "keyword_only", has_default=True, default=1.0).default
        1.0
    """

    name: str
    kind: ParameterKind
    has_default: bool = False
    default: Constant | None = None
