"""``InputAdapter`` and ``OutputAdapter``: the steps, applied in their documented order.

The steps live in :mod:`.input_steps` and :mod:`.output_steps`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._spec import AdapterSpec
from .input_steps import (
    BindToSignature,
    CastInputs,
    CheckConstants,
    CheckStructure,
    CheckTensors,
    ComplexToRealView,
    FlattenInputs,
    IntsToArrays,
    RemoveNones,
)
from .output_steps import BuildOutputTree, CheckOutputCount, InsertConstants, RealToComplex

__all__ = ["InputAdapter", "OutputAdapter"]


class InputAdapter:
    """Turns a call like the PyTorch model's into the flat list of ONNX inputs.

    Steps, in order: :class:`~adapters.input_steps.BindToSignature`,
    :class:`~adapters.input_steps.FlattenInputs`, :class:`~adapters.input_steps.CheckStructure`,
    :class:`~adapters.input_steps.RemoveNones`, :class:`~adapters.input_steps.CheckConstants`,
    :class:`~adapters.input_steps.IntsToArrays`, :class:`~adapters.input_steps.CastInputs`,
    :class:`~adapters.input_steps.CheckTensors`,
    :class:`~adapters.input_steps.ComplexToRealView`. numpy arrays and torch tensors are both
    accepted and passed on unchanged (complex ones as their real view; Python ints exported
    dynamic as 0-d int64 arrays); converting them is the runtime's job. A step with nothing
    to do for this spec (``is_identity``) is skipped.

    Args:
        spec: The adapter spec.

    Example:
        >>> import inspect, numpy as np
        >>> from onnx_export.adapters import build_adapter_spec
        >>> def forward(x, mask=None, scale=1.0): ...
        >>> spec = build_adapter_spec(inspect.signature(forward),
        ...                           ({"a": np.ones(2, np.float32)},), {}, np.ones(2))
        >>> InputAdapter(spec)({"a": np.zeros(2, np.float32)})
        [array([0., 0.], dtype=float32)]
    """

    def __init__(self, spec: AdapterSpec) -> None:
        tensors = [leaf for leaf in spec.inputs if leaf.kind == "tensor"]
        self.spec = spec
        self.bind = BindToSignature(spec.parameters)
        self.flatten = FlattenInputs(spec.input_tree)
        self.check_structure = CheckStructure(spec)
        self.remove_nones = RemoveNones(spec.input_tree)
        self.check_constants = CheckConstants(spec.inputs)
        self.ints_to_arrays = IntsToArrays(tensors)
        self.cast_inputs = CastInputs(tensors)
        self.check_tensors = CheckTensors(tensors, spec.relations, spec.conditions)
        self.to_real = ComplexToRealView(tensors)

    @property
    def steps(self) -> tuple[object, ...]:
        """The steps, in the order they run.

        Example:
            >>> from onnx_export.adapters import build_adapter_spec
            >>> adapter = InputAdapter(build_adapter_spec(None, (), {}, 0))
            >>> [type(step).__name__ for step in adapter.steps][:2]
            ['BindToSignature', 'FlattenInputs']
        """
        return (
            self.bind,
            self.flatten,
            self.check_structure,
            self.remove_nones,
            self.check_constants,
            self.ints_to_arrays,
            self.cast_inputs,
            self.check_tensors,
            self.to_real,
        )

    def __call__(self, *args: object, **kwargs: object) -> list[object]:
        """Adapt one call's arguments; return the ONNX inputs in graph order.

        Raises:
            InputBindingError: The arguments do not bind to ``forward``'s signature.
            InputStructureError: Other nesting, missing keys, or a non-tensor for a tensor.
            ConstantMismatchError: A constant differs from the exported one.
            InputDtypeError: A tensor has another dtype.
            InputShapeError: Another rank, static size, or inconsistent symbolic size.
        """
        canonical = self.bind(args, kwargs)
        leaves, key = self.flatten(canonical)
        leaves = self.check_structure(canonical, leaves, key)
        if not self.remove_nones.is_identity:
            leaves = self.remove_nones(leaves)
        return self.adapt_leaves(leaves)

    def adapt_leaves(self, leaves: list[object]) -> list[object]:
        """Check and convert the leaves of a call, one per leaf spec; the ONNX inputs.

        The steps after flattening: constants checked, ints made arrays, casts, tensor
        checks (dtypes, shapes, ranges, relations between dimensions), complex made real.
        ``onnx-export run`` feeds leaves keyed by graph input name this way, where the
        nested call cannot be rebuilt without the model's own classes.

        Args:
            leaves: One value per entry of ``spec.inputs``, in that order (no ``None`` s).

        Returns:
            The ONNX inputs in graph order.

        Example:
            >>> import numpy as np
            >>> from onnx_export.adapters import build_adapter_spec
            >>> adapter = InputAdapter(build_adapter_spec(None, (np.zeros(2, np.float32),), {}, 0))
            >>> adapter.adapt_leaves([np.ones(2, np.float32)])[0].tolist()
            [1.0, 1.0]
        """
        if not self.check_constants.is_identity:
            leaves = self.check_constants(leaves)
        if not self.ints_to_arrays.is_identity:
            leaves = self.ints_to_arrays(leaves)
        if not self.cast_inputs.is_identity:
            leaves = self.cast_inputs(leaves)
        self.check_tensors(leaves)
        if not self.to_real.is_identity:
            leaves = self.to_real(leaves)
        return leaves


class OutputAdapter:
    """Turns the flat ONNX outputs back into the PyTorch model's nested outputs.

    Steps, in order: :class:`~adapters.output_steps.CheckOutputCount`,
    :class:`~adapters.output_steps.RealToComplex`, :class:`~adapters.output_steps.InsertConstants`,
    :class:`~adapters.output_steps.BuildOutputTree`. A step with nothing to do for this spec
    (``is_identity``) is skipped.

    Args:
        spec: The adapter spec.
        allowed_classes: Classes that may be rebuilt from the spec (matched by
            ``module.qualname``); other namedtuples, dataclasses and registered classes such
            as ``ModelOutput`` come back as ``dict`` keyed by field name.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import build_adapter_spec
        >>> spec = build_adapter_spec(None, (), {}, {"y": np.ones(1), "n": 3})
        >>> OutputAdapter(spec)([np.zeros(1)])
        {'y': array([0.]), 'n': 3}
    """

    def __init__(self, spec: AdapterSpec, allowed_classes: Sequence[type] = ()) -> None:
        tensors = [leaf for leaf in spec.outputs if leaf.tensor is not None]
        self.spec = spec
        self.check_count = CheckOutputCount([leaf.tensor.name for leaf in tensors if leaf.tensor])
        self.to_complex = RealToComplex(tensors)
        self.insert_constants = InsertConstants(spec.outputs)
        self.build = BuildOutputTree(spec.output_tree, allowed_classes)
        self._passthrough = (
            spec.output_tree.kind == "leaf"
            and self.to_complex.is_identity
            and self.insert_constants.is_identity
        )

    @property
    def steps(self) -> tuple[object, ...]:
        """The steps, in the order they run.

        Example:
            >>> from onnx_export.adapters import build_adapter_spec
            >>> adapter = OutputAdapter(build_adapter_spec(None, (), {}, 0))
            >>> [type(step).__name__ for step in adapter.steps][-1]
            'BuildOutputTree'
        """
        return (self.check_count, self.to_complex, self.insert_constants, self.build)

    def __call__(self, flat_outputs: Sequence[object]) -> object:
        """Rebuild the nested outputs from the flat ONNX outputs (graph order).

        Raises:
            LeafCountError: Another number of outputs than the spec's tensor outputs.
        """
        if self._passthrough and len(flat_outputs) == 1:
            return flat_outputs[0]  # the steps would all be identities for this spec
        flat = self.check_count(flat_outputs)
        if not self.to_complex.is_identity:
            flat = self.to_complex(flat)
        if not self.insert_constants.is_identity:
            flat = self.insert_constants(flat)
        return self.build(flat)
