"""Input/output adapters that travel inside a saved ``.onnx`` file.

They let a deployment call an ONNX model exactly as it called the PyTorch model: nested
inputs in (dicts, lists, tuples, namedtuples, dataclasses, ``None``, keyword arguments,
Python scalars), nested outputs out. The runtime side needs only numpy and onnxruntime; torch
is used only when the process has already imported it. Nothing here imports a class named in
a file unless the caller allows it, and nothing is pickled.

Usage:
    >>> import numpy as np
    >>> from onnx_export.adapters import build_adapter_spec, InputAdapter, OutputAdapter
    >>> spec = build_adapter_spec(None, ({"a": np.ones(2, np.float32)},), {}, (np.ones(2),))
    >>> InputAdapter(spec)({"a": np.zeros(2, np.float32)})
    [array([0., 0.], dtype=float32)]
    >>> OutputAdapter(spec)([np.ones(2)])
    (array([1., 1.]),)
"""

from ._binding import canonicalize_inputs
from ._build import build_adapter_spec, flat_input_names, flat_output_names
from ._errors import (
    AdapterError,
    AdapterSpecError,
    ConstantMismatchError,
    InputBindingError,
    InputDtypeError,
    InputError,
    InputShapeError,
    InputStructureError,
    InvalidModelError,
    LeafCountError,
    MissingKernelError,
    ModelNotFoundError,
    ModelRunError,
    UnsupportedValueError,
)
from ._keys import tree_flatten
from ._paths import leaf_paths
from ._pipeline import InputAdapter, OutputAdapter
from ._runtime import OnnxModule, load
from ._spec import (
    FORMAT_VERSION,
    METADATA_KEY,
    AdapterSpec,
    AxisRange,
    DimCondition,
    DimRelation,
    LeafSpec,
    ParameterSpec,
    TensorSpec,
)
from ._treespec import TreeSpec
from ._unflatten import tree_unflatten

__all__ = [
    # Tree structure
    "TreeSpec",
    "tree_flatten",
    "tree_unflatten",
    "leaf_paths",
    # Adapter spec
    "FORMAT_VERSION",
    "METADATA_KEY",
    "AdapterSpec",
    "ParameterSpec",
    "LeafSpec",
    "TensorSpec",
    "AxisRange",
    "DimRelation",
    "DimCondition",
    "canonicalize_inputs",
    "build_adapter_spec",
    "flat_input_names",
    "flat_output_names",
    # Adapters
    "InputAdapter",
    "OutputAdapter",
    # Runtime
    "OnnxModule",
    "load",
    # Errors
    "AdapterError",
    "AdapterSpecError",
    "UnsupportedValueError",
    "LeafCountError",
    "InputError",
    "InputBindingError",
    "InputStructureError",
    "InputDtypeError",
    "InputShapeError",
    "ConstantMismatchError",
    "ModelNotFoundError",
    "InvalidModelError",
    "MissingKernelError",
    "ModelRunError",
]
