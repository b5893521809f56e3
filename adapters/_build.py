"""Building an :class:`~adapters.AdapterSpec` from the values seen at export time."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ._binding import argument_roots, canonicalize_inputs, parameters_from_signature
from ._dtypes import DTYPE_NAMES, dtype_name_of
from ._errors import AdapterSpecError, UnsupportedValueError
from ._json import Constant, is_constant
from ._keys import tree_flatten
from ._paths import leaf_names, leaf_paths
from ._spec import FORMAT_VERSION, AdapterSpec, Dim, LeafSpec, ParameterSpec, TensorSpec
from ._torch import is_torch_tensor
from ._treespec import TreeSpec

__all__ = ["build_adapter_spec", "flat_input_names", "flat_output_names", "input_leaf_paths"]

_CONSTANT_BASES: tuple[type, ...] = (bool, int, float, str)


def build_adapter_spec(
    signature: inspect.Signature | None,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    outputs: object,
    *,
    input_names: Callable[[int, str], str] | None = None,
    input_shapes: Mapping[int, tuple[Dim, ...]] | None = None,
    output_names: Sequence[str] | None = None,
    output_shapes: Mapping[int, tuple[Dim, ...]] | None = None,
    int_inputs: Mapping[str, str] | None = None,
) -> AdapterSpec:
    """Describe a model's call from the example inputs and eager outputs seen at export.

    The inputs are canonicalised (:func:`~adapters.canonicalize_inputs`) and flattened;
    tensor leaves (numpy arrays, torch tensors) become tensor leaf specs, int/float/bool/str
    leaves become constants. Tensors are indexed ``0, 1, ...`` in leaf order, constants not
    counted; that index keys the overrides.

    Args:
        signature: ``forward``'s signature (without ``self``), or ``None``.
        args: Positional example inputs, as passed at export.
        kwargs: Keyword example inputs, as passed at export.
        outputs: The eager outputs for those inputs.
        input_names: ``(tensor index, display path) -> graph name``; by default the dotted
            path, e.g. ``"past_key_values.1.0"`` (made unique with a ``_<n>`` suffix).
        input_shapes: Shapes with symbolic dims by tensor index; default the example shape.
        output_names: Graph output names, one per tensor output; default the dotted path
            (``"output"``, ``"output.0"``, ``"output.logits"``).
        output_shapes: Like ``input_shapes``, for outputs.
        int_inputs: Python ``int`` inputs that are graph inputs (marked dynamic), not
            constants: dotted path (``"n"``, ``"cfg.0"``) -> graph name. Each becomes a
            tensor leaf (``int64``, shape ``()``, ``python_int``), not counted in the
            tensor index of ``input_names``/``input_shapes``.

    Returns:
        The validated spec.

    Raises:
        InputBindingError: The example arguments do not bind to ``signature``.
        UnsupportedValueError: A leaf that is neither a tensor nor a constant, a dtype ONNX
            cannot carry, or an unsupported dict key.
        AdapterSpecError: An override does not fit (wrong rank, wrong number of names).

    Example:
        >>> import inspect, numpy as np
        >>> def forward(x, scale=2.0): ...
        >>> spec = build_adapter_spec(
        ...     inspect.signature(forward), ({"a": np.zeros((2, 3), np.float32)},), {},
        ...     (np.zeros(2), None), input_shapes={0: ("batch", 3)})
        >>> [(leaf.path, leaf.kind) for leaf in spec.inputs]
        [("x['a']", 'tensor'), ('scale', 'constant')]
        >>> spec.inputs[0].tensor.name, spec.inputs[0].tensor.shape
        ('x.a', ('batch', 3))
        >>> flat_input_names(spec), flat_output_names(spec)
        (['x.a'], ['output.0'])
        >>> spec = build_adapter_spec(  # an int exported dynamic: a graph input, not a constant
        ...     inspect.signature(forward), (np.zeros(2, np.float32), 5), {}, np.zeros(2),
        ...     int_inputs={"scale": "scale"})
        >>> n = spec.inputs[1].tensor
        >>> n.name, n.dtype, n.shape, n.python_int
        ('scale', 'int64', (), True)
    """
    parameters = parameters_from_signature(signature)
    in_leaves, in_tree = tree_flatten(canonicalize_inputs(signature, args, kwargs))
    paths = input_leaf_paths(in_tree, parameters)
    dotted = _input_dotted_names(in_tree, parameters)
    names_in = _names_from_callable(input_names, paths, in_leaves)
    inputs = _leaf_specs(
        in_leaves, paths, dotted, names_in, input_shapes or {}, side="input", ints=int_inputs
    )
    out_leaves, out_tree = tree_flatten(outputs)
    out_paths = leaf_paths(out_tree, "output")
    names_out = _names_from_sequence(output_names, out_leaves)
    out_names = leaf_names(out_tree, "output")
    shapes = output_shapes or {}
    outs = _leaf_specs(out_leaves, out_paths, out_names, names_out, shapes, side="output")
    return AdapterSpec(FORMAT_VERSION, parameters, in_tree, inputs, out_tree, outs)


def flat_input_names(spec: AdapterSpec) -> list[str]:
    """Return the ONNX graph input names of ``spec``, in graph order.

    Example:
        >>> import numpy as np
        >>> flat_input_names(build_adapter_spec(None, (np.zeros(1), 3), {}, 0))
        ['args.0']
    """
    return [leaf.tensor.name for leaf in spec.inputs if leaf.tensor is not None]


def flat_output_names(spec: AdapterSpec) -> list[str]:
    """Return the ONNX graph output names of ``spec``, in graph order.

    Example:
        >>> import numpy as np
        >>> flat_output_names(build_adapter_spec(None, (), {}, {"y": np.zeros(1)}))
        ['output.y']
    """
    return [leaf.tensor.name for leaf in spec.outputs if leaf.tensor is not None]


def input_leaf_paths(tree: TreeSpec, parameters: Sequence[ParameterSpec]) -> list[str]:
    """Return display paths of the leaves of a canonical ``(args, kwargs)`` tree.

    Args:
        tree: The input tree, ``(args tuple, kwargs dict)``.
        parameters: The recorded parameters, to name positional slots.

    Returns:
        One path per leaf, rooted at parameter names: ``"x['a']"``, ``"args[1]"``.

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> _, tree = tree_flatten(((1,), {"y": [2]}))
        >>> input_leaf_paths(tree, [ParameterSpec("x", "positional_only"),
        ...                         ParameterSpec("y", "positional_or_keyword")])
        ['x', 'y[0]']
    """
    return _per_argument(tree, parameters, leaf_paths, 0)


def _input_dotted_names(tree: TreeSpec, parameters: Sequence[ParameterSpec]) -> list[str]:
    return _per_argument(tree, parameters, leaf_names, 1)


def _per_argument(
    tree: TreeSpec,
    parameters: Sequence[ParameterSpec],
    walk: Callable[[TreeSpec, str], list[str]],
    style: int,
) -> list[str]:
    args_tree, kwargs_tree = tree.children
    roots = argument_roots(parameters, len(args_tree.children), kwargs_tree.keys)
    children = args_tree.children + kwargs_tree.children
    return [
        path
        for child, root in zip(children, roots, strict=True)
        for path in walk(child, root[style])
    ]


def _names_from_callable(
    fn: Callable[[int, str], str] | None, paths: Sequence[str], leaves: Sequence[object]
) -> list[str | None]:
    tensor_paths = [p for p, leaf in zip(paths, leaves, strict=True) if _is_tensor(leaf)]
    if fn is None:
        return [None] * len(tensor_paths)
    return [fn(i, p) for i, p in enumerate(tensor_paths)]


def _names_from_sequence(names: Sequence[str] | None, leaves: Sequence[object]) -> list[str | None]:
    count = sum(_is_tensor(leaf) for leaf in leaves)
    if names is None:
        return [None] * count
    if len(names) != count:
        raise AdapterSpecError(
            f"output_names: expected {count} names (one per tensor output), got {len(names)}: "
            f"{list(names)!r:.80}. Pass one name per tensor leaf of the outputs."
        )
    return list(names)


def _leaf_specs(
    leaves: Sequence[object],
    paths: Sequence[str],
    dotted: Sequence[str],
    names: Sequence[str | None],
    shapes: Mapping[int, tuple[Dim, ...]],
    *,
    side: str,
    ints: Mapping[str, str] | None = None,
) -> tuple[LeafSpec, ...]:
    specs: list[LeafSpec] = []
    used: set[str] = set()
    index = 0
    for leaf, path, default_name in zip(leaves, paths, dotted, strict=True):
        if ints and type(leaf) is int and default_name in ints:
            tensor = TensorSpec(ints[default_name], "int64", (), python_int=True)
            specs.append(LeafSpec(path, "tensor", tensor=tensor))
            used.add(tensor.name)
            continue
        if not _is_tensor(leaf):
            specs.append(LeafSpec(path, "constant", value=_constant(leaf, path, side)))
            continue
        name = names[index] or _unique(default_name or side, used)
        used.add(name)
        shape = _shape(leaf, shapes.get(index), path, f"{side}_shapes[{index}]")
        specs.append(LeafSpec(path, "tensor", tensor=TensorSpec(name, _dtype(leaf, path), shape)))
        index += 1
    return tuple(specs)


def _is_tensor(value: object) -> bool:
    return isinstance(value, np.ndarray) or is_torch_tensor(value)


def _unique(name: str, used: set[str]) -> str:
    candidate, n = name, 0
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


def _dtype(value: object, path: str) -> str:
    name = dtype_name_of(value)
    if name not in DTYPE_NAMES:
        raise UnsupportedValueError(
            f"{path}: expected a tensor dtype ONNX can carry ({', '.join(DTYPE_NAMES)}), got "
            f"{name}. Cast the tensor before it crosses the model boundary."
        )
    return name


def _shape(
    value: object, override: tuple[Dim, ...] | None, path: str, where: str
) -> tuple[Dim, ...]:
    concrete = tuple(int(d) for d in getattr(value, "shape", ()))
    if override is None:
        return concrete
    if len(override) != len(concrete):
        raise AdapterSpecError(
            f"{where}: expected {len(concrete)} dims for {path} (example shape {concrete}), got "
            f"{tuple(override)}. Give one int or symbolic name per axis."
        )
    return tuple(override)


def _constant(value: object, path: str, side: str) -> Constant:
    for base in _CONSTANT_BASES:
        if isinstance(value, base):
            converted: Constant = base(value)
            if is_constant(converted):
                return converted
    raise UnsupportedValueError(
        f"{path}: expected a tensor (numpy.ndarray or torch.Tensor), None, or a constant "
        f"(bool, int, finite float, str) as {side}, got {type(value).__qualname__} "
        f"{value!r:.40}. Make it a tensor, or keep it out of the model's {side}s."
    )
