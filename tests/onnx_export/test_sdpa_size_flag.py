"""``scaled_dot_product_attention(..., is_causal=n > 1)`` with a dynamic ``n``.

openai-whisper's attention asks SDPA for a causal mask when its decoder has a mask and more
than one token (``is_causal=mask is not None and n_ctx > 1``) and imports the function by
name. With dynamic tokens the flag is a ``SymBool`` that the fused op's parser refuses
("must be bool, not SymBool"; torch.onnx fails the same way). The patch
(``capture/patches/_sdpa_flag.py``) passes the flag on: decided by the tokens' range, or,
for a range that includes 1, as a mask chosen at run time. Every file runs in ONNX Runtime
against eager at the example, at 1 where the range has it, and at other sizes; a past
(keys longer than queries) proves the mask is PyTorch's top-left triangle.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.nn.functional import scaled_dot_product_attention  # by name, as whisper does

import onnx_export
from onnx_export.capture.patches._sdpa_flag import sdpa_size_flag
from tests.helpers import assert_onnx_program_close


class _Attention(nn.Module):
    """whisper's MultiHeadAttention on its SDPA path (causal where a mask is given)."""

    def __init__(self, dim: int = 16, heads: int = 2, keyword: bool = False) -> None:
        super().__init__()
        self.heads, self.keyword = heads, keyword
        self.query, self.key, self.value = (
            nn.Linear(dim, dim),
            nn.Linear(dim, dim),
            nn.Linear(dim, dim),
        )
        self.register_buffer("mask", torch.ones(1))

    def forward(self, x: torch.Tensor, past: torch.Tensor | None = None) -> torch.Tensor:
        source = x if past is None else torch.cat([past, x], dim=1)
        q, k, v = self.query(x), self.key(source), self.value(source)
        q, k, v = (t.view(*t.shape[:2], self.heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        causal = self.mask is not None and q.shape[2] > 1
        if self.keyword:
            a = scaled_dot_product_attention(query=q, key=k, value=v, is_causal=causal)
        else:
            a = scaled_dot_product_attention(q, k, v, None, 0.0, causal)
        return a.permute(0, 2, 1, 3).flatten(start_dim=2)


def _export(model: nn.Module, *args: torch.Tensor, shapes: object) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    return onnx_export.dynamo_export(model, *args, export_options=options)


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
def test_a_flag_the_range_decides_is_that_bool(keyword: bool) -> None:
    model = _Attention(keyword=keyword).eval()
    tokens = Dim("tokens", min=2, max=64)
    program = _export(model, torch.randn(1, 5, 16), shapes={"x": {1: tokens}})
    for n in (2, 5, 13):  # the smallest size the range has, the example, another
        assert_onnx_program_close(program, model, torch.randn(1, n, 16), atol=1e-5)


def test_a_flag_the_range_leaves_open_is_decided_at_run_time() -> None:
    model = _Attention().eval()
    tokens = Dim("tokens", min=1, max=64)
    program = _export(model, torch.randn(1, 1, 16), shapes={"x": {1: tokens}})
    for n in (1, 2, 7):  # one token: no mask; more: causal
        assert_onnx_program_close(program, model, torch.randn(1, n, 16), atol=1e-5)


def test_with_a_past_the_mask_is_pytorchs_top_left_triangle() -> None:
    # Keys longer than queries: PyTorch's causal mask keeps key j for query i when j <= i
    # (top left), unlike a mask aligned to the end; one query keeps every key.
    model = _Attention().eval()
    tokens, past = Dim("tokens", min=1, max=32), Dim("past", min=1, max=32)
    example = (torch.randn(1, 1, 16), torch.randn(1, 3, 16))
    program = _export(model, *example, shapes={"x": {1: tokens}, "past": {1: past}})
    for n, p in ((1, 3), (4, 2), (3, 9), (6, 1)):
        assert_onnx_program_close(
            program, model, torch.randn(1, n, 16), torch.randn(1, p, 16), atol=1e-5
        )


def test_plain_bools_and_the_name_come_back_after_capture() -> None:
    original = torch.nn.functional.scaled_dot_product_attention
    q = k = v = torch.randn(1, 2, 4, 8)
    with sdpa_size_flag():
        patched = globals()["scaled_dot_product_attention"]  # this module's own name, too
        assert patched is not original
        assert torch.nn.functional.scaled_dot_product_attention is patched
        assert torch.equal(patched(q, k, v, is_causal=True), original(q, k, v, is_causal=True))
    assert globals()["scaled_dot_product_attention"] is original
    assert torch.nn.functional.scaled_dot_product_attention is original
