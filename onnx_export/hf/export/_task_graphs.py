"""The graphs that make up each task's exported folder, by task name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx_export.hf.export.graphs._audio import audio_graphs
from onnx_export.hf.export.graphs._base import GraphSpec, accepts, causal_lm_graphs
from onnx_export.hf.export.graphs._seq2seq import seq2seq_graphs
from onnx_export.hf.export.graphs._text import TEXT_OUTPUTS, text_graphs
from onnx_export.hf.export.graphs._vision import VISION_OUTPUTS, vision_graphs, zero_shot_graphs
from onnx_export.hf.export.graphs._vlm import vlm_graphs

__all__ = ["graphs_for_task"]

_TEXT_TASKS = (*TEXT_OUTPUTS, "sentence-similarity")


_BUILDERS: dict[str, Callable[[Any], list[GraphSpec]]] = {
    "text-generation": causal_lm_graphs,
    "text2text-generation": seq2seq_graphs,
    "image-to-text": seq2seq_graphs,
    "image-text-to-text": vlm_graphs,
    "audio-classification": audio_graphs,
    "zero-shot-image-classification": zero_shot_graphs,
}


def graphs_for_task(model: Any, task: str) -> list[GraphSpec]:  # a dispatch
    """The graphs that make up ``task``'s exported folder, for ``model`` in eval mode."""
    if task in _BUILDERS:
        return _BUILDERS[task](model)
    if task == "automatic-speech-recognition":
        encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        return seq2seq_graphs(model) if encoder_decoder else audio_graphs(model)
    if task == "feature-extraction" and not accepts(model, "input_ids"):
        if accepts(model, "pixel_values"):
            return vision_graphs(model, task)
        return audio_graphs(model, ("last_hidden_state",))
    if task in _TEXT_TASKS:
        return text_graphs(model, task)
    if task in VISION_OUTPUTS:
        return vision_graphs(model, task)
    raise ValueError(f"no graphs for task {task!r}")  # resolve_task let an unknown task in
