"""The output adapter's steps, each a small class with one job.

:class:`~adapters.OutputAdapter` applies them in this fixed order:

1. :class:`CheckOutputCount` - one flat output per tensor leaf of the output spec.
2. :class:`RealToComplex` - real views (trailing axis of 2) become complex where the spec says
   the output is complex.
3. :class:`InsertConstants` - constant outputs recorded at export are put back in place.
4. :class:`BuildOutputTree` - rebuild the nested structure: dicts, tuples, lists;
   namedtuples, dataclasses and registered classes (``ModelOutput``) as ``dict`` unless their
   class is in ``allowed_classes``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._dtypes import REAL_OF_COMPLEX
from ._errors import LeafCountError
from ._spec import LeafSpec
from ._tensor_checks import real_to_complex
from ._treespec import TreeSpec
from ._unflatten import allowed_by_name, compile_unflatten

__all__ = ["CheckOutputCount", "RealToComplex", "InsertConstants", "BuildOutputTree"]


class CheckOutputCount:
    """Step 1: the runtime must return one value per tensor output of the spec.

    Args:
        names: The graph output names, in order.

    Example:
        >>> CheckOutputCount(["y"])([1])
        [1]
    """

    def __init__(self, names: Sequence[str]) -> None:
        self._names = list(names)

    def __call__(self, flat: Sequence[object]) -> list[object]:
        """Return the outputs as a list; raise ``LeafCountError`` on another count."""
        if len(flat) != len(self._names):
            raise LeafCountError(
                f"outputs: expected {len(self._names)} flat outputs {self._names}, got "
                f"{len(flat)}. Run the session with exactly these output names."
            )
        return flat if type(flat) is list else list(flat)


class RealToComplex:
    """Step 2: turn real views back into complex tensors where the spec says complex.

    Args:
        tensors: The tensor leaf specs of the outputs, in graph order.

    Attributes:
        is_identity: True when no output is complex; the adapter then skips this step.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import TensorSpec
        >>> step = RealToComplex([LeafSpec("o", "tensor", TensorSpec("o", "complex64", ()))])
        >>> step([np.array([0.0, 1.0], np.float32)])
        [array(0.+1.j, dtype=complex64)]
    """

    def __init__(self, tensors: Sequence[LeafSpec]) -> None:
        self._complex = tuple(
            (i, leaf.tensor.dtype)
            for i, leaf in enumerate(tensors)
            if leaf.tensor is not None and leaf.tensor.dtype in REAL_OF_COMPLEX
        )
        self.is_identity = not self._complex

    def __call__(self, flat: list[object]) -> list[object]:
        """Return the outputs with complex ones rebuilt (the list is modified in place)."""
        for i, dtype in self._complex:
            flat[i] = real_to_complex(flat[i], dtype)
        return flat


class InsertConstants:
    """Step 3: put the constant outputs recorded at export back among the tensor outputs.

    Args:
        outputs: All output leaf specs, in leaf order.

    Attributes:
        is_identity: True when no output is a constant; the adapter then skips this step.

    Example:
        >>> step = InsertConstants([LeafSpec("output[0]", "tensor", tensor=None),
        ...                         LeafSpec("output[1]", "constant", value="mean")])
        >>> step(["array"])
        ['array', 'mean']
    """

    def __init__(self, outputs: Sequence[LeafSpec]) -> None:
        self._plan = tuple((leaf.kind == "constant", leaf.value) for leaf in outputs)
        self.is_identity = all(not is_constant for is_constant, _ in self._plan)

    def __call__(self, flat: list[object]) -> list[object]:
        """Return all leaves in leaf order."""
        tensors = iter(flat)
        return [value if is_constant else next(tensors) for is_constant, value in self._plan]


class BuildOutputTree:
    """Step 4: rebuild the nested outputs from their leaves.

    Args:
        tree: The output tree spec.
        allowed_classes: Classes that may be rebuilt (matched by ``module.qualname``);
            other namedtuples, dataclasses and registered classes come back as ``dict``.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, tree = tree_flatten({"logits": 0, "past": [(0, 0)]})
        >>> BuildOutputTree(tree)([1, 2, 3])
        {'logits': 1, 'past': [(2, 3)]}
    """

    def __init__(self, tree: TreeSpec, allowed_classes: Sequence[type] = ()) -> None:
        self._build = compile_unflatten(tree, allowed_by_name(allowed_classes))
        self._single_leaf = tree.kind == "leaf"

    def __call__(self, leaves: list[object]) -> object:
        """Return the nested outputs."""
        if self._single_leaf:
            return leaves[0]
        return self._build(iter(leaves))
