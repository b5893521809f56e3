"""``arange`` with a floating result has torch's length and values, also at dynamic sizes."""

from __future__ import annotations

import torch

import onnx_export
from tests.helpers import export_and_check


class Boundaries(torch.nn.Module):
    """Idefics3's kind: patch boundaries ``arange(1/n, 1, 1/n)`` with ``n`` from the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        boundaries = torch.arange(1 / n, 1.0, 1 / n)
        return x * boundaries.sum() + torch.bucketize(x.sigmoid(), boundaries).to(x.dtype)


def test_float_arange_counts_as_torch_at_the_example() -> None:
    export_and_check(Boundaries(), torch.randn(2, 6))  # 1/6 steps: 6 elements in torch


class HalfSteps(torch.nn.Module):
    """A float ``arange`` whose end is a dynamic size: ``arange(0.5, n, 0.5)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = torch.arange(0.5, x.shape[1], 0.5)
        return x.sum(dim=1, keepdim=True) * steps


def test_float_arange_counts_as_torch_at_other_sizes() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {1: "n"}})
    program = export_and_check(HalfSteps(), torch.randn(2, 5), options=options)
    for n in (3, 6, 7, 10):
        x = torch.randn(2, n)
        torch.testing.assert_close(torch.as_tensor(program(x)), HalfSteps()(x))
