"""Sizes put in a small tensor and read back, as SAM 3's DETR decoder does (#28).

SAM 3's vision encoder stores its feature map's ``(height, width)`` with
``torch.tensor(...)``; the decoder reads them back to build a box position bias over
``arange(height)`` and ``arange(width)``, added to attention over ``height * width`` keys.
torch's fake tensors kept the values of one-element constants only, so the read-back sizes
were unbacked and ``height * width == keys`` undecidable ("Could not guard on
data-dependent expression" in ``scaled_dot_product_attention``).
``capture/patches/_small_constants.py`` keeps the values of small constants while tracing.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses import fake_tensor

import onnx_export
from onnx_export.capture.patches._small_constants import small_constants_kept
from tests.capture_patches import refused_without
from tests.helpers import assert_onnx_program_close, export_and_check


class RelativeBias(torch.nn.Module):
    """Attention of queries over a feature map, biased by sizes read back from a tensor."""

    def forward(self, queries: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        high, wide = features.shape[-2:]
        shapes = torch.tensor([(high, wide)], dtype=torch.long)
        keys = features.flatten(2).transpose(1, 2)[:, None]  # one head
        ys = torch.arange(0, shapes[0, 0], dtype=queries.dtype) / shapes[0, 0]
        xs = torch.arange(0, shapes[0, 1], dtype=queries.dtype) / shapes[0, 1]
        grid = (ys[:, None] + xs[None, :]).flatten()
        bias = queries.mean(-1, keepdim=True) * grid  # (batch, 1, queries, high * wide)
        return torch.nn.functional.scaled_dot_product_attention(queries, keys, keys, bias)


def test_sizes_read_back_from_a_constant() -> None:
    export_and_check(RelativeBias(), torch.randn(2, 1, 5, 8), torch.randn(2, 8, 4, 6))


def test_sizes_read_back_at_other_static_sizes() -> None:
    model, queries = RelativeBias(), torch.randn(2, 1, 5, 8)
    for features in (torch.randn(2, 8, 3, 7), torch.randn(2, 8, 1, 5)):
        export_and_check(model, queries, features)


def test_dynamic_sizes_read_back_are_still_refused() -> None:
    """Sizes that are dynamic are no constant: read back, they are unbacked (the limit).

    The export is refused at the attention, not made wrong.
    """
    shapes = {"queries": None, "features": {2: "high", 3: "wide"}}
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    model, queries = RelativeBias(), torch.randn(2, 1, 5, 8)
    try:
        program = onnx_export.dynamo_export(
            model, queries, torch.randn(2, 8, 4, 6), export_options=options
        )
    except onnx_export.CaptureError as caught:
        assert "data-dependent" in str(caught).splitlines()[0]
        return
    # A newer torch (2.15) captures it: then the program computes eager's numbers at
    # other sizes, or the limit this test names has turned into a wrong answer.
    for features in (torch.randn(2, 8, 3, 7), torch.randn(2, 8, 1, 5)):
        assert_onnx_program_close(program, model, queries, features)
    pytest.skip(
        f"torch {torch.__version__} captures dynamic sizes read back (and the program is "
        "right at other sizes): this limit is lifted"
    )


def test_limit_restored() -> None:
    before = fake_tensor.CONSTANT_NUMEL_LIMIT
    with small_constants_kept():
        assert before < fake_tensor.CONSTANT_NUMEL_LIMIT
    assert before == fake_tensor.CONSTANT_NUMEL_LIMIT


def test_without_the_values_the_attention_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof the capture patch is needed."""
    error = refused_without(
        monkeypatch,
        "small_constants",
        lambda: onnx_export.dynamo_export(
            RelativeBias(), torch.randn(2, 1, 5, 8), torch.randn(2, 8, 4, 6)
        ),
    )
    assert "data-dependent" in str(error).splitlines()[0]
