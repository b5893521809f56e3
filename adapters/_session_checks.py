"""What ``OnnxModule`` checks and decides about its onnxruntime session.

Provider names are resolved (``"cuda"`` -> ``CUDAExecutionProvider``, falling back to CPU with
a warning), the spec is read from the model's metadata through onnxruntime alone, and the
spec is checked against the graph's inputs and outputs before any call.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from ._dtypes import ORT_TYPES, onnx_value_dtype
from ._iobinding import onnx_value_shape
from ._json import spec_error
from ._spec import METADATA_KEY, AdapterSpec, LeafSpec

__all__ = ["PROVIDER_ALIASES", "resolve_providers", "read_spec", "check_spec_fits_session"]

PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
"""Short provider names accepted by :class:`~adapters.OnnxModule` (case-insensitive)."""

_CPU = "CPUExecutionProvider"


def resolve_providers(requested: Sequence[str] | None, available: Sequence[str]) -> list[str]:
    """Turn requested provider names into onnxruntime names that are available.

    Args:
        requested: ``["cuda"]``, ``["cpu"]``, onnxruntime names, or ``None`` (CPU).
        available: ``onnxruntime.get_available_providers()``.

    Returns:
        The providers to use, CPU always last.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     resolve_providers(["cuda"], ["CPUExecutionProvider"])
        ['CPUExecutionProvider']
        >>> "falling back to CPUExecutionProvider" in str(caught[0].message)
        True
    """
    if isinstance(requested, str):
        requested = [requested]
    resolved: list[str] = []
    for name in requested or ():
        full = PROVIDER_ALIASES.get(name.lower(), name)
        if full not in available:
            warnings.warn(
                f"execution provider {name!r} ({full}) is not available in this onnxruntime "
                f"(available: {list(available)}); falling back to {_CPU}. For CUDA, install "
                "onnxruntime-gpu built for your CUDA version.",
                RuntimeWarning,
                stacklevel=4,
            )
        elif full not in resolved:
            resolved.append(full)
    if _CPU in resolved:
        resolved.remove(_CPU)
    return [*resolved, _CPU]


def read_spec(session: Any) -> AdapterSpec | None:
    """Read the adapter spec from a session's model metadata, or ``None`` if it has none.

    Only onnxruntime is needed (``get_modelmeta().custom_metadata_map``); ``onnx`` is not.

    Args:
        session: An ``onnxruntime.InferenceSession``.

    Returns:
        The validated spec, or ``None``.

    Raises:
        AdapterSpecError: The metadata is malformed.
    """
    text = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    return None if text is None else AdapterSpec.from_json(text)


def check_spec_fits_session(spec: AdapterSpec, session: Any) -> None:
    """Check that the spec's tensor leaves are exactly the graph's inputs and outputs.

    Names must match one to one; each dtype must be the graph's (complex tensors as their real
    view), and ranks and static sizes must agree where the graph declares them.

    Args:
        spec: The adapter spec.
        session: An ``onnxruntime.InferenceSession``.

    Raises:
        AdapterSpecError: Naming the field that does not fit, e.g. ``outputs[1].tensor.dtype``.
    """
    _check_side("inputs", spec.inputs, session.get_inputs())
    _check_side("outputs", spec.outputs, session.get_outputs())


def _check_side(side: str, leaves: Sequence[LeafSpec], graph_args: Sequence[Any]) -> None:
    graph = {arg.name: arg for arg in graph_args}
    tensors = [(i, leaf.tensor) for i, leaf in enumerate(leaves) if leaf.tensor is not None]
    names = [t.name for _, t in tensors]
    if sorted(names) != sorted(graph):
        raise spec_error(
            side,
            f"one tensor leaf per graph {side[:-1]} {sorted(graph)} (the metadata may belong to "
            "another model)",
            f"tensor leaves {names}",
        )
    for i, tensor in tensors:
        arg = graph[tensor.name]
        expected_type = ORT_TYPES[onnx_value_dtype(tensor.dtype)]
        if arg.type != expected_type:
            raise spec_error(f"{side}[{i}].tensor.dtype", f"the graph's {arg.type}", expected_type)
        shape = onnx_value_shape(tensor)
        graph_shape = arg.shape
        if not isinstance(graph_shape, list) or (not graph_shape and shape):
            continue  # the graph does not declare a shape
        if len(graph_shape) != len(shape) or any(
            isinstance(g, int) and isinstance(s, int) and g != s
            for g, s in zip(graph_shape, shape, strict=True)
        ):
            raise spec_error(
                f"{side}[{i}].tensor.shape", f"a shape that fits the graph's {graph_shape}", shape
            )
