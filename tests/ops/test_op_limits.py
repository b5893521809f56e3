"""A limit of one of our functions fails the export with a specific, actionable error."""

from __future__ import annotations

import pytest
import torch

import onnx_export
from onnx_export.errors import UnsupportedOpInputError

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class _Attention3d(torch.nn.Module):
    """Attention over 3-D inputs (our own path) needs a static head size to scale by."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_dynamic_shape_where_static_is_needed_names_op_need_and_next_step() -> None:
    head = {2: "head"}
    options = onnx_export.ExportOptions(dynamic_shapes={"q": head, "k": head, "v": head})
    q, k, v = torch.rand(2, 4, 8), torch.rand(2, 6, 8), torch.rand(2, 6, 8)
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(_Attention3d(), q, k, v, export_options=options)
    cause = caught.value.__cause__
    assert isinstance(cause, UnsupportedOpInputError)
    assert cause.op == "aten::scaled_dot_product_attention"
    assert cause.expected == "a static head size (last dimension of query)"
    assert "head" in cause.got
    message = str(caught.value)
    assert "aten::scaled_dot_product_attention needs a static head size" in message
    assert "dynamic_shapes" in message  # the next step


def test_the_error_is_a_conversion_error() -> None:
    error = UnsupportedOpInputError("aten::foo", "a known rank", "unknown rank")
    assert isinstance(error, onnx_export.ConversionError)
    assert str(error).startswith("aten::foo needs a known rank, but got unknown rank.")
