"""Text encoders' graphs, for every text task but generation.

Fill-mask, classification, token classification, question answering, multiple choice,
feature extraction and sentence similarity.

Inputs as tokenizers give them: ``input_ids``, ``attention_mask`` and, for models whose
forward takes it, ``token_type_ids``; batch and sequence length dynamic (and the number
of choices for multiple choice). Outputs named as transformers names them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from onnx_export.hf.export.graphs._base import (
    BATCH,
    TEXT_DIMS,
    GraphSpec,
    accepts,
    example_ids,
    select,
)

__all__ = ["TEXT_OUTPUTS", "text_graphs"]

#: task -> the model outputs its graph returns.
TEXT_OUTPUTS: dict[str, tuple[str, ...]] = {
    "feature-extraction": ("last_hidden_state",),
    "fill-mask": ("logits",),
    "text-classification": ("logits",),
    "token-classification": ("logits",),
    "multiple-choice": ("logits",),
    "question-answering": ("start_logits", "end_logits"),
}

_LENGTH = 7
_CHOICES = 2


class TextHead(nn.Module):
    """``input_ids``, ``attention_mask`` -> the task's outputs."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        """Run the model and keep the task's outputs."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return select(out, self.outputs)


class TextHeadWithTypes(TextHead):
    """``input_ids``, ``attention_mask``, ``token_type_ids`` -> the task's outputs."""

    def forward(  # type: ignore[override]  # one more input
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> dict[str, Any]:
        """Run the model and keep the task's outputs."""
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        return select(out, self.outputs)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of the token embeddings over the tokens the mask keeps."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


class SentenceEmbedder(TextHead):
    """``token_embeddings`` and their masked mean, ``sentence_embedding``."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        """Embed each sentence as the mean of its token embeddings."""
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return {"token_embeddings": hidden, "sentence_embedding": mean_pool(hidden, attention_mask)}


class SentenceEmbedderWithTypes(TextHead):
    """:class:`SentenceEmbedder` for models that take ``token_type_ids``."""

    def forward(  # type: ignore[override]  # one more input
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> dict[str, Any]:
        """Embed each sentence as the mean of its token embeddings."""
        hidden = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        return {"token_embeddings": hidden, "sentence_embedding": mean_pool(hidden, attention_mask)}


def _takes_types(model: nn.Module) -> bool:
    return accepts(model, "token_type_ids")


def text_graphs(model: Any, task: str) -> list[GraphSpec]:
    """``model.onnx`` for a text encoder task."""
    shape: tuple[int, ...] = (BATCH, _LENGTH)
    dims: dict[int, str] = dict(TEXT_DIMS)
    if task == "multiple-choice":
        shape = (BATCH, _CHOICES, _LENGTH)
        dims = {0: "batch", 1: "num_choices", 2: "sequence_length"}
    ids = example_ids(model.config, shape[0], int(torch.tensor(shape[1:]).prod())).reshape(shape)
    mask = torch.ones(shape, dtype=torch.long)
    mask[0, ..., -2:] = 0  # one padded row: the mask must be honoured
    args: tuple[Any, ...] = (ids, mask)
    names = ["input_ids", "attention_mask"]
    types = _takes_types(model)
    if types:
        args += (torch.zeros(shape, dtype=torch.long),)
        names.append("token_type_ids")
    module: nn.Module
    if task == "sentence-similarity":
        module = SentenceEmbedderWithTypes(model, ()) if types else SentenceEmbedder(model, ())
    else:
        outputs = TEXT_OUTPUTS[task]
        module = TextHeadWithTypes(model, outputs) if types else TextHead(model, outputs)
    return [GraphSpec("model.onnx", module, args, {name: dims for name in names})]
