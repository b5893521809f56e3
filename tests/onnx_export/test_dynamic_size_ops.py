"""Ops that were static-only, now over dynamic sizes: ``diagonal_scatter``.

(Adaptive and fractional pooling are in ``test_adaptive_pool.py``.) Each case runs at
three sizes the example did not have, at the default opset and at 13.
"""

from __future__ import annotations

import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close


class DiagonalScatter(torch.nn.Module):
    def __init__(self, offset: int, dim1: int, dim2: int) -> None:
        super().__init__()
        self.offset, self.dim1, self.dim2 = offset, dim1, dim2

    def forward(self, x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.diagonal_scatter(x, src, self.offset, self.dim1, self.dim2)


def _src(model: DiagonalScatter, x: torch.Tensor) -> torch.Tensor:
    return torch.randn_like(torch.diagonal(x, model.offset, model.dim1, model.dim2))


@pytest.mark.parametrize("opset", [20, 13], ids=["opset20", "opset13"])
@pytest.mark.parametrize(
    ("offset", "dim1", "dim2", "shape"),
    [(0, 0, 1, (5, 7)), (2, 0, 1, (5, 7)), (-1, 1, 2, (3, 6, 4)), (1, 2, 0, (4, 3, 6))],
    ids=["main", "above", "below-3d", "swapped-dims"],
)
def test_diagonal_scatter_over_dynamic_sizes(
    offset: int, dim1: int, dim2: int, shape: tuple[int, ...], opset: int
) -> None:
    model = DiagonalScatter(offset, dim1, dim2)
    x = torch.randn(*shape)
    src = _src(model, x)
    dynamic = {
        "x": {axis: f"x{axis}" for axis in range(x.dim())},
        "src": {axis: f"s{axis}" for axis in range(src.dim())},
    }
    options = onnx_export.ExportOptions(dynamic_shapes=dynamic, opset_version=opset)
    program = onnx_export.dynamo_export(model, x, src, export_options=options)
    for by in (1, 2, 4):
        bigger = torch.randn(*[size + by for size in shape])
        assert_onnx_program_close(program, model, bigger, _src(model, bigger))
