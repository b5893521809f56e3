"""Shared helpers for the adapters tests: tiny ONNX models and one tree comparison."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnx_export.adapters import METADATA_KEY, AdapterSpec

OPSET = 21
IR_VERSION = 10

Value = tuple[str, int, Sequence[int | str]]
"""(name, onnx.TensorProto element type, shape) of a graph input or output."""


def make_model(
    inputs: Sequence[Value],
    outputs: Sequence[Value],
    nodes: Sequence[onnx.NodeProto],
    spec: AdapterSpec | None = None,
) -> onnx.ModelProto:
    """Build and check a model; with ``spec``, store it in ``metadata_props``."""
    graph = helper.make_graph(
        list(nodes),
        "adapters_test",
        [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in outputs],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    if spec is not None:
        helper.set_model_props(model, {METADATA_KEY: spec.to_json()})
    onnx.checker.check_model(model)
    return model


def assert_tree_close(
    actual: object, expected: object, *, rtol: float = 1e-6, path: str = "out"
) -> None:
    """Compare nested outputs: same container types and keys, leaves close (arrays/tensors)."""
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        for f in dataclasses.fields(expected):
            assert_tree_close(
                getattr(actual, f.name),
                getattr(expected, f.name),
                rtol=rtol,
                path=f"{path}.{f.name}",
            )
        return
    if isinstance(expected, dict):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_tree_close(actual[k], expected[k], rtol=rtol, path=f"{path}[{k!r}]")
        return
    if isinstance(expected, tuple | list):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_tree_close(a, e, rtol=rtol, path=f"{path}[{i}]")
        return
    if hasattr(expected, "shape") and hasattr(expected, "dtype"):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert str(actual.dtype) == str(expected.dtype), (
            f"{path}: {actual.dtype} != {expected.dtype}"
        )  # type: ignore[attr-defined]
        np.testing.assert_allclose(_numbers(actual), _numbers(expected), rtol=rtol, err_msg=path)
        return
    assert type(actual) is type(expected) and actual == expected, (
        f"{path}: {actual!r} != {expected!r}"
    )


def _numbers(value: object) -> np.ndarray[Any, Any]:
    """A numpy array of a tensor/array; bfloat16 and float8 widened to float32."""
    if hasattr(value, "detach"):  # a torch tensor
        tensor = value.detach().cpu()
        if tensor.dtype.itemsize < 4 and tensor.is_floating_point():
            tensor = tensor.float()
        return np.asarray(tensor.numpy())
    array = np.asarray(value)
    if array.dtype.name.startswith(("bfloat", "float8")):
        array = array.astype(np.float32)
    return array
