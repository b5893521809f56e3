"""The graphs that make up each task's exported folder, by task name."""

from __future__ import annotations

from typing import Any

from onnx_export.hf._graphs import (
    GraphSpec,
    causal_lm_graphs,
    image_classifier_graphs,
    text_encoder_graphs,
)
from onnx_export.hf._graphs_seq2seq import seq2seq_graphs

__all__ = ["graphs_for_task"]


def graphs_for_task(model: Any, task: str) -> list[GraphSpec]:
    """The graphs that make up ``task``'s exported folder, for ``model`` in eval mode."""
    if task == "text-generation":
        return causal_lm_graphs(model)
    if task in ("text2text-generation", "automatic-speech-recognition"):
        return seq2seq_graphs(model)
    if task == "feature-extraction":
        return text_encoder_graphs(model, "last_hidden_state")
    if task == "text-classification":
        return text_encoder_graphs(model, "logits")
    if task == "image-classification":
        return image_classifier_graphs(model)
    raise ValueError(f"no graphs for task {task!r}")  # resolve_task let an unknown task in
