"""Audio graphs: audio classification and CTC speech recognition.

Raw waveforms as ``input_values`` (batch, samples), batch and length dynamic (Wav2Vec2,
HuBERT, WavLM, ...), or log-mel ``input_features`` (batch, mel bins, frames) for models
that take those (Whisper's encoder classifier, ...).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from onnx_export.hf.export.graphs._base import BATCH, GraphSpec, accepts, select

__all__ = ["audio_graphs"]

_SAMPLES = 4000


class WaveformHead(nn.Module):
    """``input_values`` -> ``logits``."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_values: torch.Tensor) -> dict[str, Any]:
        """Run the model on a batch of waveforms."""
        return select(self.model(input_values=input_values), self.outputs)


class FeaturesHead(nn.Module):
    """``input_features`` -> ``logits``."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_features: torch.Tensor) -> dict[str, Any]:
        """Run the model on a batch of log-mel features."""
        return select(self.model(input_features=input_features), self.outputs)


def audio_graphs(model: Any, outputs: tuple[str, ...] = ("logits",)) -> list[GraphSpec]:
    """``model.onnx`` for audio classification, CTC recognition or audio features."""
    generator = torch.Generator().manual_seed(0)
    config = model.config
    if accepts(model, "input_values"):
        waves = torch.randn(BATCH, _SAMPLES, generator=generator)
        dims = {"input_values": {0: "batch", 1: "sequence_length"}}
        return [GraphSpec("model.onnx", WaveformHead(model, outputs), (waves,), dims)]
    bins = int(getattr(config, "num_mel_bins", 80))
    frames = 2 * int(getattr(config, "max_source_positions", 1500))
    features = torch.randn(BATCH, bins, frames, generator=generator)
    dims = {"input_features": {0: "batch"}}
    return [GraphSpec("model.onnx", FeaturesHead(model, outputs), (features,), dims)]
