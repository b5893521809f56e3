"""Qwen2-VL and Qwen2.5-VL's graphs for ``image-text-to-text`` (the layout of ``_vlm.py``).

- ``vision_encoder.onnx``: one image's patches, flattened as the processor writes them
  (``pixel_values``: patches, channels * temporal patch * patch * patch) and its
  ``image_grid_thw`` (1, 3) -> ``image_features`` (1, image tokens, hidden): the patch
  embedding, the vision blocks (packed attention, ``capture/patches/_packed_attention.py``) and
  the merger. Qwen2.5-VL's blocks attend within windows too; where each window starts
  and the order of the merged patches in them (``window_index``, ``cu_window_seqlens``)
  come in as inputs, computed by the runtime with numpy (transformers takes them
  precomputed the same way), since they are loops over the grid's values.
- ``embed_tokens.onnx``: as for the other families.
- ``decoder_model.onnx``: the other families' decoder, but ``position_ids`` is
  (3, batch, length): M-RoPE's temporal, height and width rows, computed by the runtime
  (transformers' ``get_rope_index``), so no index computation is in the graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from onnx_export.hf.export.graphs._base import (
    BATCH,
    PAST,
    PAST_DIMS,
    SEQUENCE,
    GraphSpec,
    example_ids,
)

__all__ = ["MROPE_FAMILIES", "qwen_vl_graphs", "PatchedImageEncoder"]

#: model_type of the families whose decoder takes (3, batch, length) position ids.
MROPE_FAMILIES = ("qwen2_vl", "qwen2_5_vl")

#: The example image's grid (frames, patch rows, patch columns): 24 patches, 6 tokens.
_GRID = (1, 4, 6)


def _windowed(vision: Any) -> bool:
    """Whether the vision tower attends within windows (Qwen2.5-VL)."""
    return hasattr(vision, "fullatt_block_indexes") and hasattr(vision, "window_size")


class PatchedImageEncoder(nn.Module):
    """``pixel_values`` (patches, patch size) and ``image_grid_thw`` -> ``image_features``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.visual: Any = model.model.visual  # type: ignore[union-attr]

    def forward(
        self,
        pixel_values: torch.Tensor,
        image_grid_thw: torch.Tensor,
        window_index: torch.Tensor | None = None,
        cu_window_seqlens: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """The merged features of one image, (1, tokens, hidden)."""
        extra = {}
        if window_index is not None:
            extra = {"window_index": window_index, "cu_window_seqlens": cu_window_seqlens}
        out = self.visual(pixel_values, grid_thw=image_grid_thw, **extra)
        return {"image_features": out.pooler_output.unsqueeze(0)}


def _vision_window_index() -> Any:
    """The ``get_vision_window_index`` of recent transformers (not in 4.x nor 5.0.0)."""
    try:
        from transformers.vision_utils import get_vision_window_index
    except ImportError:
        import transformers

        from onnx_export.hf._errors import CheckpointError

        raise CheckpointError(
            "Exporting a Qwen2-VL or Qwen2.5-VL checkpoint needs a transformers release with "
            "transformers.vision_utils (its vision tower's window index and outputs; 5.0.0 "
            f"and 4.x lack it, 5.25 has it); transformers {transformers.__version__} is "
            "installed. Run: pip install -U transformers"
        ) from None
    return get_vision_window_index


def _encoder(model: Any) -> GraphSpec:
    get_vision_window_index = _vision_window_index()
    visual = model.model.visual
    config = visual.config
    size = int(config.in_channels) * int(config.temporal_patch_size) * int(config.patch_size) ** 2
    frames, rows, columns = _GRID
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(frames * rows * columns, size, generator=generator)
    grid = torch.tensor([_GRID], dtype=torch.long)
    args: tuple[Any, ...] = (pixels, grid)
    dynamic: dict[str, Any] = {"pixel_values": {0: "patches"}, "image_grid_thw": None}
    if _windowed(visual):
        index, starts = get_vision_window_index(
            grid, visual.spatial_merge_size, visual.window_size, visual.patch_size
        )
        args += (index.long(), starts.long())
        dynamic["window_index"] = {0: "image_tokens"}
        dynamic["cu_window_seqlens"] = {0: "windows"}
    return GraphSpec("vision_encoder.onnx", PatchedImageEncoder(model), args, dynamic)


def qwen_vl_graphs(model: Any, decoder: nn.Module, embed: GraphSpec) -> list[GraphSpec]:
    """The vision encoder, the token embedding and the M-RoPE decoder of a Qwen2(.5)-VL."""
    text = model.config.get_text_config()
    embedding = model.get_input_embeddings()
    with torch.no_grad():
        prompt = embedding(example_ids(text, BATCH, PAST))
        mask = torch.ones(BATCH, PAST, dtype=torch.long)
        positions = torch.arange(PAST).expand(3, BATCH, PAST)
        past = decoder(prompt, mask, positions, [])["present"]
        step = embedding(example_ids(text, BATCH, SEQUENCE))
    mask = torch.ones(BATCH, PAST + SEQUENCE, dtype=torch.long)
    positions = torch.arange(PAST, PAST + SEQUENCE).expand(3, BATCH, SEQUENCE).clone()
    positions[1:] += 2  # the rows differ, as after an image
    dynamic: dict[str, Any] = {
        "inputs_embeds": {0: "batch", 1: "sequence_length"},
        "attention_mask": {0: "batch", 1: "total_sequence_length"},
        "position_ids": {1: "batch", 2: "sequence_length"},
        "past_key_values": [{"key": PAST_DIMS, "value": PAST_DIMS}] * len(past),
    }
    spec = GraphSpec("decoder_model.onnx", decoder, (step, mask, positions, past), dynamic)
    return [_encoder(model), embed, spec]
