"""A limit of one of our functions fails the export with a specific, actionable error."""

from __future__ import annotations

import pytest
import torch

import onnx_export
from onnx_export.errors import UnsupportedOpInputError

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class _DiagonalScatter(torch.nn.Module):
    """``diagonal_scatter`` needs its input's shape (im2col takes dynamic ones now)."""

    def forward(self, x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.diagonal_scatter(x, src, 0, 1, 2)


def test_dynamic_shape_where_static_is_needed_names_op_need_and_next_step() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}, "src": {0: "batch"}})
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(
            _DiagonalScatter(), torch.rand(2, 5, 5), torch.rand(2, 5), export_options=options
        )
    cause = caught.value.__cause__
    assert isinstance(cause, UnsupportedOpInputError)
    assert cause.op == "aten::diagonal_scatter"
    assert cause.expected == "a static shape of its input"
    assert "batch" in cause.got
    message = str(caught.value)
    assert "aten::diagonal_scatter needs a static shape of its input" in message
    assert "dynamic_shapes" in message  # the next step


def test_the_error_is_a_conversion_error() -> None:
    error = UnsupportedOpInputError("aten::foo", "a known rank", "unknown rank")
    assert isinstance(error, onnx_export.ConversionError)
    assert str(error).startswith("aten::foo needs a known rank, but got unknown rank.")
