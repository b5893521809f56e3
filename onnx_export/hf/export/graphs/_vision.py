"""Vision graphs, for every image task but image-to-text.

Image classification, semantic segmentation, object detection, depth estimation, image
feature extraction, and CLIP/SigLIP-style zero-shot classification.

``pixel_values`` (batch, channels, height, width) with batch dynamic, and height and width
too where the model allows it (convolutional models; a model whose position table fixes
the image size is exported again with the size fixed).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from onnx_export.hf.export.graphs._base import BATCH, GraphSpec, example_ids, select

__all__ = ["VISION_OUTPUTS", "vision_graphs", "zero_shot_graphs", "image_size"]

#: task -> the model outputs its graph returns.
VISION_OUTPUTS: dict[str, tuple[str, ...]] = {
    "image-classification": ("logits",),
    "semantic-segmentation": ("logits",),
    "object-detection": ("logits", "pred_boxes"),
    "depth-estimation": ("predicted_depth",),
    "feature-extraction": ("last_hidden_state",),
}

_TWO_TOWER_OUTPUTS = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")


class VisionHead(nn.Module):
    """``pixel_values`` -> the task's outputs."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, pixel_values: torch.Tensor) -> dict[str, Any]:
        """Run the model on a batch of images and keep the task's outputs."""
        return select(self.model(pixel_values=pixel_values), self.outputs)


class TwoTower(nn.Module):
    """Texts and images -> their similarity logits and embeddings (CLIP, SigLIP)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pixel_values: torch.Tensor
    ) -> dict[str, Any]:
        """Score every image against every text."""
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values
        )
        return select(out, _TWO_TOWER_OUTPUTS)


def _vision_config(config: Any) -> Any:
    return getattr(config, "vision_config", None) or getattr(config, "encoder", None) or config


def image_size(config: Any) -> tuple[int, int]:
    """The (height, width) the config names, 224 when it names none."""
    vision = _vision_config(config)
    size = getattr(vision, "image_size", None) or getattr(config, "image_size", None) or 224
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def example_pixels(config: Any, batch: int = BATCH) -> torch.Tensor:
    """Random ``pixel_values`` of the config's image size and channels."""
    vision = _vision_config(config)
    channels = int(getattr(vision, "num_channels", 3) or 3)
    height, width = image_size(config)
    generator = torch.Generator().manual_seed(0)
    return torch.randn(batch, channels, height, width, generator=generator)


def vision_graphs(model: Any, task: str) -> list[GraphSpec]:
    """``model.onnx`` for an image task; height and width dynamic when the model allows."""
    pixels = example_pixels(model.config)
    module = VisionHead(model, VISION_OUTPUTS[task])
    sized = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    fixed = {"pixel_values": {0: "batch"}}
    return [GraphSpec("model.onnx", module, (pixels,), sized, fallback=fixed)]


def zero_shot_graphs(model: Any) -> list[GraphSpec]:
    """``model.onnx`` of a two-tower model: texts (batch of texts) against images."""
    config = model.config
    text_config = getattr(config, "text_config", config)
    ids = example_ids(text_config, 3, 7)
    mask = torch.ones(ids.shape, dtype=torch.long)
    pixels = example_pixels(config)
    dynamic = {  # texts and images have batches of their own
        "input_ids": {0: "text_batch", 1: "sequence_length"},
        "attention_mask": {0: "text_batch", 1: "sequence_length"},
        "pixel_values": {0: "image_batch"},
    }
    return [GraphSpec("model.onnx", TwoTower(model), (ids, mask, pixels), dynamic)]
