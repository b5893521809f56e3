"""Axis ranges in the adapter spec: JSON round trip, old specs, bad ranges, calls outside."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from onnx_export.adapters import (
    AdapterSpec,
    AdapterSpecError,
    AxisRange,
    InputAdapter,
    InputShapeError,
    build_adapter_spec,
)


def _spec(*ranges: AxisRange) -> AdapterSpec:
    spec = build_adapter_spec(
        None,
        (np.zeros((4, 3), np.float32),),
        {},
        np.zeros((4, 3), np.float32),
        input_shapes={0: ("batch", 3)},
        output_shapes={0: ("batch", 3)},
    )
    (leaf,) = spec.inputs
    assert leaf.tensor is not None
    tensor = dataclasses.replace(leaf.tensor, axis_ranges=ranges)
    return dataclasses.replace(spec, inputs=(dataclasses.replace(leaf, tensor=tensor),))


def test_ranges_survive_the_json_round_trip() -> None:
    spec = _spec(AxisRange(0, 3, None, "the model's code at m.py:3 (if x.shape[0] > 2:)"))
    again = AdapterSpec.from_json(spec.to_json())
    assert again == spec
    assert again.inputs[0].tensor is not None
    assert again.inputs[0].tensor.axis_ranges[0].text() == "[3, inf)"


def test_a_spec_written_before_ranges_still_loads() -> None:
    obj = json.loads(_spec().to_json())
    assert "axis_ranges" not in obj["inputs"][0]["tensor"]  # not written when empty
    loaded = AdapterSpec.from_json(json.dumps(obj))
    assert loaded.inputs[0].tensor is not None
    assert loaded.inputs[0].tensor.axis_ranges == ()
    InputAdapter(loaded)(np.zeros((1, 3), np.float32))  # no range: any batch


@pytest.mark.parametrize(
    ("bounds", "field"),
    [
        (AxisRange(1, 3, None), "a symbolic"),
        (AxisRange(5, 3, None), "an axis of the input"),
        (AxisRange(0, 8, 3), r"axis_ranges\[0\]': expected low <= high"),
        (AxisRange(0, -1, None), r"axis_ranges\[0\]': expected low and high"),
    ],
    ids=["static-axis", "no-such-axis", "low-above-high", "negative"],
)
def test_bad_ranges_are_refused_naming_the_field(bounds: AxisRange, field: str) -> None:
    with pytest.raises(AdapterSpecError, match=field):
        _spec(bounds)


def test_a_call_outside_the_range_names_input_axis_range_and_origin() -> None:
    adapter = InputAdapter(_spec(AxisRange(0, 3, 8, "Dim('b', min=3, max=8) in dynamic_shapes")))
    adapter(np.zeros((8, 3), np.float32))
    with pytest.raises(InputShapeError) as caught:
        adapter(np.zeros((9, 3), np.float32))
    message = str(caught.value)
    assert "'batch' (axis 0) in [3, 8]" in message and "got 9" in message
    assert "Dim('b', min=3, max=8)" in message


def test_a_file_that_cannot_serve_its_declared_axis_is_a_typed_error() -> None:
    from onnx import TensorProto, helper

    from onnx_export.adapters import ModelRunError, OnnxModule

    # What files exported elsewhere hold: an input [batch, 3] and a Reshape to the example's
    # (2, 3).
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 3])
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="baked_reshape")],
        "baked",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    spec = build_adapter_spec(
        None,
        (np.zeros((2, 3), np.float32),),
        {},
        np.zeros((2, 3), np.float32),
        input_shapes={0: ("batch", 3)},
        input_names=lambda index, path: "x",
        output_names=["y"],
    )
    module = OnnxModule(model.SerializeToString(), spec)
    module(np.zeros((2, 3), np.float32))
    with pytest.raises(ModelRunError) as caught:
        module(np.zeros((4, 3), np.float32))
    message = str(caught.value)
    assert "'baked_reshape' (Reshape)" in message and "x (4, 3)" in message
    assert "[ONNXRuntimeError]" not in message and "onnxruntime_src" not in message
