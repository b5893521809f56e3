"""A limit of one of our functions fails the export with a specific, actionable error."""

from __future__ import annotations

import pytest
import torch

import onnx_export
from onnx_export.errors import UnsupportedOpInputError

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class _Im2col(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.im2col(x, [2, 2], [1, 1], [0, 0], [1, 1])


def test_dynamic_shape_where_static_is_needed_names_op_need_and_next_step() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(_Im2col(), torch.rand(2, 3, 5, 5), export_options=options)
    cause = caught.value.__cause__
    assert isinstance(cause, UnsupportedOpInputError)
    assert cause.op == "aten::im2col"
    assert cause.expected == "a static shape of its input"
    assert "batch" in cause.got
    message = str(caught.value)
    assert "aten::im2col needs a static shape of its input" in message
    assert "dynamic_shapes" in message  # the next step


def test_the_error_is_a_conversion_error() -> None:
    error = UnsupportedOpInputError("aten::foo", "a known rank", "unknown rank")
    assert isinstance(error, onnx_export.ConversionError)
    assert str(error).startswith("aten::foo needs a known rank, but got unknown rank.")
