"""transformers' masks with an extra pattern (Gemma's image blocks) capture without ``vmap``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnx_export
from onnx_export.capture.patches._transformers_masks import masks_without_vmap
from tests.helpers import assert_onnx_program_close, export_and_check

masking = pytest.importorskip("transformers.masking_utils")

pytestmark = pytest.mark.usefixtures("private_temp_folder")
#: transformers 5's builders take ``use_vmap``; 4.x's always vmap (``_vmap_for_bhqkv``).
_FIVE = hasattr(masking, "blockwise_overlay")
five = pytest.mark.skipif(not _FIVE, reason="transformers 5's mask API (blockwise_overlay)")
four = pytest.mark.skipif(_FIVE, reason="transformers 4.x's mask API (_vmap_for_bhqkv)")


class BlockMask(torch.nn.Module):
    """A causal mask with bidirectional blocks (``blockwise_overlay``), as Gemma's images."""

    def forward(self, x: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        pattern = masking.or_masks(masking.causal_mask_function, masking.blockwise_overlay(blocks))
        builder = masking.AttentionMaskInterface._global_mapping["sdpa"]
        batch, length = blocks.shape
        mask = builder(
            batch_size=batch, q_length=length, kv_length=length, mask_function=pattern,
            allow_is_causal_skip=False, use_vmap=True, device=x.device,
        )  # fmt: skip
        return x.masked_fill(~mask, 0.0)


def _blocks(batch: int, length: int) -> torch.Tensor:
    ids = torch.full((batch, length), -1)
    ids[:, 1:4] = 0  # one image block early in each row
    ids[-1, length - 2 :] = 1  # and one at the end of the last row
    return ids


@five
def test_the_indexed_mask_is_the_vmap_mask() -> None:
    model, blocks = BlockMask(), _blocks(2, 7)
    x = torch.randn(2, 1, 7, 7)
    with masks_without_vmap():
        indexed = model(x, blocks)
    torch.testing.assert_close(indexed, model(x, blocks), rtol=0, atol=0)


@five
def test_a_block_mask_exports_and_serves_other_sizes() -> None:
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch", 2: "q", 3: "k"}, "blocks": {0: "batch", 1: "q"}}
    )
    model = BlockMask()
    x = torch.randn(2, 1, 7, 7)
    program = export_and_check(model, x, _blocks(2, 7), options=options)
    assert not any(n.domain.startswith("functorch") for n in program.model.graph)
    assert_onnx_program_close(program, model, torch.randn(3, 1, 9, 9), _blocks(3, 9))


class BlockMaskFour(torch.nn.Module):
    """The same mask through transformers 4.x's ``sdpa_mask``, which always expands by vmap."""

    def forward(self, x: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        def same_block(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> Any:
            return (blocks[b, q] >= 0) & (blocks[b, q] == blocks[b, kv])

        pattern = masking.or_masks(masking.causal_mask_function, same_block)
        builder = masking.AttentionMaskInterface._global_mapping["sdpa"]
        batch, length = blocks.shape
        mask = builder(
            batch_size=batch, cache_position=torch.arange(length), kv_length=length,
            mask_function=pattern, allow_is_causal_skip=False,
        )  # fmt: skip
        return x.masked_fill(~mask, 0.0)


@four
def test_the_broadcast_mask_is_the_vmap_mask_on_transformers_4() -> None:
    model, blocks = BlockMaskFour(), _blocks(2, 7)
    x = torch.randn(2, 1, 7, 7)
    with masks_without_vmap():
        indexed = model(x, blocks)
    torch.testing.assert_close(indexed, model(x, blocks), rtol=0, atol=0)


@four
def test_a_block_mask_exports_without_functorch_on_transformers_4() -> None:
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch", 2: "q", 3: "k"}, "blocks": {0: "batch", 1: "q"}}
    )
    model = BlockMaskFour()
    x = torch.randn(2, 1, 7, 7)
    program = export_and_check(model, x, _blocks(2, 7), options=options)
    assert not any(n.domain.startswith("functorch") for n in program.model.graph)
    assert_onnx_program_close(program, model, torch.randn(3, 1, 9, 9), _blocks(3, 9))
