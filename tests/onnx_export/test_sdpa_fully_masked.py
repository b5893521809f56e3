"""``scaled_dot_product_attention`` with a bool mask that hides every key from a query.

Eager PyTorch (CPU) gives 0 for such a row; a softmax over keys that are all masked is
undefined in ONNX (ONNX Runtime spreads it evenly, or gives NaN). The exported model
zeros those rows, on every path of the standard target: torchlib's 4-D function, our own
for other ranks, and opset 23's ``Attention`` node (which ONNX Runtime already zeros).
Float masks get the same check for rows of ``-inf`` (tests/onnx_export/
test_masked_attention_numerics.py); no mask adds no check. (``target="onnxruntime"`` leaves
the check out, so that ONNX Runtime's attention fusions match: docs/numerics.md.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close


class Attend(nn.Module):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


def _inputs(
    q_shape: tuple[int, ...], kv_shape: tuple[int, ...], mask_shape: tuple[int, ...]
) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    q, k, v = torch.randn(*q_shape), torch.randn(*kv_shape), torch.randn(*kv_shape)
    mask = torch.rand(*mask_shape) > 0.4
    mask[..., 0] = True  # every row attends somewhere ...
    mask[..., 1, :] = False  # ... but query 1, which attends nowhere
    return q, k, v, mask


_CASES = [
    pytest.param((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 4, 5), {}, id="4d"),
    pytest.param((2, 3, 4, 8), (2, 3, 5, 8), (4, 5), {}, id="4d_mask_2d"),
    pytest.param((3, 4, 8), (3, 5, 8), (3, 4, 5), {}, id="3d"),
    pytest.param((2, 4, 4, 8), (2, 2, 5, 8), (2, 1, 4, 5), {"enable_gqa": True}, id="gqa"),
]


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize(("q", "kv", "mask", "kwargs"), _CASES)
def test_a_query_with_every_key_masked_gives_zero(
    q: Any, kv: Any, mask: Any, kwargs: Any, opset: int
) -> None:
    model, inputs = Attend(**kwargs), _inputs(q, kv, mask)
    assert model(*inputs)[..., 1, :].abs().max() == 0  # what eager gives
    options = onnx_export.ExportOptions(opset_version=opset)
    program = onnx_export.dynamo_export(model, *inputs, export_options=options)
    assert_onnx_program_close(program, model, *inputs)


def _padded(batch: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(batch)
    q, k, v = torch.randn(batch, 2, 3, 8), torch.randn(batch, 2, 6, 8), torch.randn(batch, 2, 6, 8)
    mask = torch.ones(batch, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 4:] = False  # the first sequence is padded at the end
    mask[1] = False  # the second sequence is all padding
    return q, k, v, mask


def test_a_padding_mask_that_hides_a_whole_sequence() -> None:
    batch = {0: "batch"}
    shapes = {"q": batch, "k": batch, "v": batch, "mask": batch}
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    program = onnx_export.dynamo_export(Attend(), *_padded(2), export_options=options)
    for size in (2, 3):
        assert_onnx_program_close(program, Attend(), *_padded(size))


def test_no_mask_adds_no_check_and_a_float_mask_adds_one() -> None:
    """Without a mask nothing is checked; a float mask is checked for rows of ``-inf``.

    A float mask of large finite values (``-1e4``) masks nothing fully: eager gives the
    softmax of what is left, and the check leaves those rows as they are.
    """
    q, k, v, _ = _inputs((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 4, 5))
    additive = torch.zeros(2, 3, 4, 5).masked_fill(torch.rand(2, 3, 4, 5) > 0.5, -1e4)
    program = onnx_export.dynamo_export(Attend(), q, k, v, additive)
    assert_onnx_program_close(program, Attend(), q, k, v, additive)
    assert "IsInf" in [n.op_type for n in program.model.graph]
    program = onnx_export.dynamo_export(_NoMask(), q, k, v)
    assert_onnx_program_close(program, _NoMask(), q, k, v)
    assert not {"ReduceMax", "IsInf"} & {n.op_type for n in program.model.graph}


class _NoMask(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
