"""``math.sqrt`` of sizes read from data, compared with a constant (#28).

LLaVA-OneVision interpolates its unpadded image grid only ``if math.sqrt(h * w / c) >
1.1``, ``h`` and ``w`` computed from ``image_sizes`` values. ``math.sqrt`` asked for a
float the trace does not have; ``capture/patches/_sqrt.py`` computes the root in the graph with
the range the sizes' bounds give it, which decides the comparison where the bounds do.
"""

from __future__ import annotations

import math

import pytest
import torch

import onnx_export
from tests.capture_patches import refused_without
from tests.helpers import assert_onnx_program_close, export_and_check


class Trimmed(torch.nn.Module):
    """Rows and columns trimmed by counts read from data, doubled when the grid is large."""

    def __init__(self, threshold: float) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, x: torch.Tensor, trims: torch.Tensor) -> torch.Tensor:
        top, left = trims[0].item(), trims[1].item()
        for trim, side in ((top, x.shape[1]), (left, x.shape[2])):
            torch._check(trim >= 0)
            torch._check(2 * trim <= side)
        y = x[:, top : x.shape[1] - top, left : x.shape[2] - left]
        if math.sqrt(y.shape[1] * y.shape[2] / 36) > self.threshold:
            return y * 2
        return y + math.sqrt(4)


def test_a_comparison_the_bounds_decide() -> None:
    """At most 4 x 6 cells: the root is at most 0.82, never above 1.1."""
    model, x = Trimmed(1.1), torch.randn(3, 4, 6)
    program = export_and_check(model, x, torch.tensor([0, 1]))
    for trims in ([2, 0], [1, 3], [0, 0]):
        assert_onnx_program_close(program, model, x, torch.tensor(trims))


def test_a_comparison_the_bounds_leave_open_is_refused() -> None:
    """The root may be above or below 0.5: the branch is the model's, still refused."""
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(Trimmed(0.5), torch.randn(3, 4, 6), torch.tensor([0, 1]))
    assert "test_bounded_sqrt.py:" in str(caught.value).splitlines()[0]


def test_without_the_range_the_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof the capture patch is needed."""
    error = refused_without(
        monkeypatch,
        "sqrt",
        lambda: onnx_export.dynamo_export(Trimmed(1.1), torch.randn(3, 4, 6), torch.tensor([0, 1])),
    )
    assert "math.sqrt" in str(error).splitlines()[0]
    assert math.sqrt.__module__ == "math"  # restored
