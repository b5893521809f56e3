"""Adaptive average pooling with a dynamic batch (Swin, ResNet heads) at two sizes."""

from __future__ import annotations

import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close


@pytest.mark.parametrize(
    ("pool", "shape"),
    [
        pytest.param(torch.nn.AdaptiveAvgPool2d(1), (2, 8, 5, 7), id="global-2d"),
        pytest.param(torch.nn.AdaptiveAvgPool2d((2, 3)), (2, 8, 5, 7), id="windows-2d"),
        pytest.param(torch.nn.AdaptiveAvgPool1d(1), (2, 8, 16), id="global-1d"),
        pytest.param(torch.nn.AdaptiveAvgPool3d((1, 2, 2)), (2, 3, 4, 5, 6), id="windows-3d"),
    ],
)
def test_adaptive_avg_pool_with_a_dynamic_batch(
    pool: torch.nn.Module, shape: tuple[int, ...]
) -> None:
    x = torch.randn(*shape)
    options = onnx_export.ExportOptions(dynamic_shapes={"input": {0: "batch"}})
    program = onnx_export.dynamo_export(pool, x, export_options=options)
    for batch in (2, 5):
        assert_onnx_program_close(program, pool, torch.randn(batch, *shape[1:]))
