"""The input adapter's steps, each a small class with one job.

:class:`~adapters.InputAdapter` applies them in this fixed order:

1. :class:`BindToSignature` - bind ``(*args, **kwargs)`` to ``forward``'s signature; canonical
   ``(args, kwargs)`` with defaults filled in.
2. :class:`FlattenInputs` - flatten into leaves (``None`` kept as a placeholder) and a
   structure key.
3. :class:`CheckStructure` - the key must equal the exported one (dicts may come in any key
   order; they are put back in export order).
4. :class:`RemoveNones` - drop the ``None`` placeholders; the graph has no input for them.
5. :class:`CheckConstants` - non-tensor leaves must equal the exported constants; only the
   tensors (and the Python ints exported dynamic) go on.
6. :class:`IntsToArrays` - Python ints exported dynamic become 0-d ``int64`` arrays.
7. :class:`CastInputs` - tensors in a dtype their spec allows (``cast_from``: float32 for a
   half-precision export) are cast to the exported dtype.
8. :class:`CheckTensors` - tensor type, dtype, rank, static dims, and one size per symbolic
   dimension name across all inputs.
9. :class:`ComplexToRealView` - complex tensors become their real view (trailing axis of 2).

Everything that depends only on the spec is computed when a step is built; calls do the
minimum. Errors name the input by display path (``past_key_values[1][0]``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._binding import Binder, argument_roots
from ._cast_inputs import CastInputs
from ._errors import ConstantMismatchError, InputShapeError, InputStructureError
from ._flatten import StructureKey, flatten_arguments, flatten_with_key, key_from_spec
from ._json import Constant
from ._library_containers import slid_cache_in
from ._matchers import ArgumentsMatcher
from ._mismatch import describe_value, first_mismatch, reorder_dicts_like
from ._spec import AdapterSpec, LeafSpec, ParameterSpec
from ._tensor_checks import CheckTensors, ComplexToRealView
from ._treespec import TreeSpec

__all__ = [
    "BindToSignature",
    "FlattenInputs",
    "CheckStructure",
    "RemoveNones",
    "CheckConstants",
    "IntsToArrays",
    "CastInputs",
    "CheckTensors",
    "ComplexToRealView",
]

Canonical = tuple[tuple[object, ...], dict[str, object]]


class BindToSignature(Binder):
    """Step 1: bind the call's arguments to ``forward``'s recorded signature.

    A :class:`~adapters._binding.Binder` built from the recorded parameters; calling it
    returns the canonical ``(args, kwargs)`` or raises ``InputBindingError``.

    Args:
        parameters: The recorded parameters.

    Example:
        >>> step = BindToSignature([ParameterSpec("x", "positional_or_keyword"),
        ...                         ParameterSpec("k", "keyword_only", True, 2)])
        >>> step((1,), {})
        ((), {'x': 1, 'k': 2})
    """

    def __init__(self, parameters: Sequence[ParameterSpec]) -> None:
        super().__init__(Binder.triples(parameters))


class FlattenInputs:
    """Step 2: flatten the canonical inputs into leaves and a structure key.

    ``None`` leaves stay as placeholders so that the structure check sees them. Inputs with
    the exported structure take a fast path that returns the exported key object itself;
    anything else is flattened generically and left for :class:`CheckStructure` to judge.

    Args:
        tree: The exported input tree.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, tree = tree_flatten(((), {"x": [1, None]}))
        >>> FlattenInputs(tree)(((), {"x": [2, None]}))
        ([2, None], ('tuple', ('tuple',), ('dict', ('x',), ('list', 'leaf', 'none'))))
    """

    def __init__(self, tree: TreeSpec) -> None:
        self._match = ArgumentsMatcher(tree)
        self._expected = key_from_spec(tree)

    def __call__(self, canonical: Canonical) -> tuple[list[object], StructureKey]:
        """Return ``(leaves, key)``.

        Raises:
            InputShapeError: A ``transformers`` sliding-window cache that has slid: its
                tensors no longer say how many tokens it has seen.
        """
        args, kwargs = canonical
        _check_caches(args, kwargs)
        leaves: list[object] = []
        if self._match(args, kwargs, leaves):
            return leaves, self._expected
        leaves = []
        return leaves, flatten_arguments(args, kwargs, leaves)


def _check_caches(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    """Refuse a ``transformers`` cache whose tensors no longer hold its whole past."""
    problem = slid_cache_in(args, kwargs)
    if problem is not None:
        raise InputShapeError(problem)


class CheckStructure:
    """Step 3: the inputs must have the exported structure.

    Dicts whose keys match but come in another order are reordered to the export order.

    Args:
        spec: The adapter spec.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import build_adapter_spec
        >>> spec = build_adapter_spec(None, ({"a": 1, "b": 2},), {}, 0)
        >>> leaves, key = FlattenInputs(spec.input_tree)((({"b": 2, "a": 1},), {}))
        >>> CheckStructure(spec)((({"b": 2, "a": 1},), {}), leaves, key)
        [1, 2]
    """

    def __init__(self, spec: AdapterSpec) -> None:
        self._tree = spec.input_tree
        self._expected = key_from_spec(spec.input_tree)
        self._leaves = spec.inputs
        args_tree, kwargs_tree = spec.input_tree.children
        n_args = len(args_tree.children)
        roots = argument_roots(spec.parameters, n_args, kwargs_tree.keys)
        self._roots = [display for display, _ in roots]

    def __call__(
        self, canonical: Canonical, leaves: list[object], key: StructureKey
    ) -> list[object]:
        """Return the leaves in export order; raise ``InputStructureError`` on a mismatch."""
        if key is self._expected or key == self._expected:
            return leaves
        reordered: list[object] = []
        if flatten_with_key(reorder_dicts_like(self._tree, canonical), reordered) == self._expected:
            return reordered
        raise InputStructureError(self._explain(canonical))

    def _explain(self, canonical: Canonical) -> str:
        args, kwargs = canonical
        args_tree, kwargs_tree = self._tree.children
        missing = [k for k in kwargs_tree.keys if k not in kwargs]
        unexpected = [k for k in kwargs if k not in kwargs_tree.keys]
        if len(args) != len(args_tree.children):
            problem = (
                f"forward's positional arguments: expected {len(args_tree.children)} (as at "
                f"export), got {len(args)}"
            )
        elif missing or unexpected:
            problem = (
                f"forward's keyword arguments: expected {list(kwargs_tree.keys)}, got "
                f"{list(kwargs)} (missing {missing}, unexpected {unexpected})"
            )
        else:
            values = (*args, *(kwargs[str(k)] for k in kwargs_tree.keys))
            problem = self._first_argument_mismatch(values) or "inputs: structure differs"
        return (
            f"{problem}. Pass inputs with the same nesting as at export (containers, dict "
            "keys, None positions), or re-export with the new structure."
        )

    def _first_argument_mismatch(self, values: tuple[object, ...]) -> str | None:
        args_tree, kwargs_tree = self._tree.children
        offset = 0
        arguments = args_tree.children + kwargs_tree.children
        for child_spec, value, root in zip(arguments, values, self._roots, strict=True):
            count = child_spec.num_leaves
            problem = first_mismatch(child_spec, value, root, self._leaves[offset : offset + count])
            if problem:
                return problem
            offset += count
        return None


class RemoveNones:
    """Step 4: drop the ``None`` placeholders; the ONNX graph has no input for them.

    Args:
        tree: The input tree; with it, the positions to keep are computed once (the
            structure check has already made the leaves match it). Without it, every
            ``None`` is dropped.

    Attributes:
        is_identity: True when the tree has no ``None``; the adapter then skips this step.

    Example:
        >>> RemoveNones()([1, None, 2])
        [1, 2]
    """

    def __init__(self, tree: TreeSpec | None = None) -> None:
        slots = None if tree is None else _slots(tree)
        self._keep = None if slots is None else tuple(i for i, s in enumerate(slots) if s)
        self.is_identity = slots is not None and all(slots)

    def __call__(self, leaves: list[object]) -> list[object]:
        """Return the leaves without ``None``."""
        if self._keep is None:
            return [leaf for leaf in leaves if leaf is not None]
        return [leaves[i] for i in self._keep]


def _slots(tree: TreeSpec) -> list[bool]:
    """One entry per leaf or ``None`` placeholder, in flattening order: True for a leaf."""
    if tree.kind in ("leaf", "none"):
        return [tree.kind == "leaf"]
    return [slot for child in tree.children for slot in _slots(child)]


class CheckConstants:
    """Step 5: non-tensor leaves must equal the recorded constants; tensors go on.

    Args:
        inputs: The input leaf specs.

    Attributes:
        is_identity: True when there are no constants; the adapter then skips this step.

    Example:
        >>> step = CheckConstants(
        ...     [LeafSpec("x", "tensor", tensor=None), LeafSpec("k", "constant", value=2)]
        ... )
        >>> step(["array", 2])
        ['array']
    """

    def __init__(self, inputs: Sequence[LeafSpec]) -> None:
        self._constants = tuple(
            (i, leaf.path, leaf.value) for i, leaf in enumerate(inputs) if leaf.kind == "constant"
        )
        self._tensor_positions = tuple(i for i, leaf in enumerate(inputs) if leaf.kind == "tensor")
        self._all_tensors = not self._constants
        self.is_identity = self._all_tensors

    def __call__(self, leaves: list[object]) -> list[object]:
        """Return the tensor leaves; raise ``ConstantMismatchError`` on a differing constant."""
        for i, path, expected in self._constants:
            got = _python_scalar(leaves[i])
            if type(got) is not type(expected) or got != expected:
                raise _constant_error(path, expected, leaves[i])  # type: ignore[arg-type]  # constants only
        if self._all_tensors:
            return leaves
        return [leaves[i] for i in self._tensor_positions]


class IntsToArrays:
    """Step 6: Python ints exported dynamic (``Dim.DYNAMIC`` on an int) become 0-d int64 arrays.

    Args:
        tensors: The tensor leaf specs, in graph order (the leaves this step gets).

    Attributes:
        is_identity: True when no input is such an int; the adapter then skips this step.

    Example:
        >>> from onnx_export.adapters import TensorSpec
        >>> n = TensorSpec("n", "int64", (), python_int=True)
        >>> step = IntsToArrays([LeafSpec("n", "tensor", tensor=n)])
        >>> step([7])
        [array(7)]
    """

    def __init__(self, tensors: Sequence[LeafSpec]) -> None:
        self._ints = tuple(
            (i, leaf.path, leaf.tensor.int_range or (None, None))
            for i, leaf in enumerate(tensors)
            if leaf.tensor is not None and leaf.tensor.python_int
        )
        self.is_identity = not self._ints

    def __call__(self, leaves: list[object]) -> list[object]:
        """Return the leaves with each such int as an array.

        Raises:
            InputStructureError: Not an int (a float, a bool, a tensor).
            InputShapeError: An int outside the range the program holds for.
        """
        out = list(leaves)
        for i, path, (low, high) in self._ints:
            value = out[i]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise InputStructureError(
                    f"{path}: expected a Python int (the model was exported with this input "
                    f"dynamic), got {describe_value(value)}. Pass a Python int, as at export "
                    "(int(t) of a 0-d tensor t)."
                )
            if (low is not None and value < low) or (high is not None and value > high):
                raise InputShapeError(
                    f"{path}: expected an int in [{low}, {'inf' if high is None else high}], "
                    f"the values the model's code was exported for, got {value}. Re-export "
                    "with an example in the range you need (torch.export finds the range "
                    "from the code: a branch on the value, sizes 0 and 1)."
                )
            out[i] = np.array(value, dtype=np.int64)
        return out


def _python_scalar(value: object) -> object:
    """A numpy scalar (``np.float64(2.0)``) as the Python value the export recorded for it."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        item = getattr(value, "item", None)
        if callable(item) and type(value).__name__ != "ndarray":
            return item()
    return value


def _constant_error(path: str, expected: Constant, got: object) -> ConstantMismatchError:
    return ConstantMismatchError(
        f"{path}: expected the constant {expected!r} ({type(expected).__name__}) the model was "
        f"exported with, got {describe_value(got)}. Constants are baked into the ONNX graph: "
        f"pass {expected!r}, or re-export the model with the new value."
    )
