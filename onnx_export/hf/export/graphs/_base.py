"""The modules each task exports, with example inputs and dynamic dimensions.

Decoders are wrapped so that their key/value cache travels as flat tensors: the wrapper
builds ``transformers``' cache object inside ``forward``, calls the model with
``use_cache=True`` and returns the updated keys and values flat again. One graph serves
the prompt (past length 0) and every later step.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from torch import nn

__all__ = [
    "GraphSpec",
    "output_cache",
    "flat",
    "dynamic_cache",
    "example_ids",
    "accepts",
    "cache_keyword",
    "BATCH",
    "SEQUENCE",
    "PAST",
    "PAST_DIMS",
    "causal_lm_graphs",
    "text_encoder_graphs",
    "image_classifier_graphs",
    "select",
    "TEXT_DIMS",
]

TEXT_DIMS = {0: "batch", 1: "sequence_length"}

BATCH, SEQUENCE, PAST = 2, 3, 4
PAST_DIMS = {0: "batch", 2: "past_sequence_length"}


@dataclasses.dataclass(frozen=True)
class GraphSpec:
    """One ONNX file to write: the module, its example inputs, its dynamic dimensions.

    ``fallback`` is tried when the export with ``dynamic_shapes`` fails: fewer dynamic
    dimensions (e.g. a fixed image size for a model whose position table fixes it).
    """

    file_name: str
    module: nn.Module
    args: tuple[Any, ...]
    dynamic_shapes: dict[str, Any]
    fallback: dict[str, Any] | None = None


def select(out: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``names`` read from a transformers output, as a dict (the ONNX outputs' names)."""
    picked = {}
    for name in names:
        value = getattr(out, name, None)
        if value is None:
            raise ValueError(f"{type(out).__name__} has no {name!r}")
        picked[name] = value
    return picked


def accepts(model: nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def cache_keyword(model: nn.Module) -> str:
    """``cache`` on transformers >= 5.2x, ``past_key_values`` before."""
    return "cache" if accepts(model, "cache") else "past_key_values"


def output_cache(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def flat(layers: Any) -> list[dict[str, torch.Tensor]]:
    return [{"key": layer.keys, "value": layer.values} for layer in layers]


def dynamic_cache(past_key_values: list[dict[str, torch.Tensor]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(kv["key"], kv["value"]) for kv in past_key_values])


class CausalLMWithPast(nn.Module):
    """A causal LM called with its past keys and values flat; returns logits and presents."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.cache_keyword = cache_keyword(model)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One step: the prompt (past length 0) or the next tokens."""
        return self.step(
            past_key_values,
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
        )

    def step(
        self, past_key_values: list[dict[str, torch.Tensor]], **inputs: torch.Tensor
    ) -> dict[str, Any]:
        """The model on ``inputs`` (its keyword arguments) and the flat past: logits, presents."""
        cache = dynamic_cache(past_key_values)
        out = self.model(**inputs, use_cache=True, **{self.cache_keyword: cache})
        return {"logits": out.logits, "present": flat(output_cache(out).layers)}


class TextEncoder(nn.Module):
    """``input_ids``, ``attention_mask`` -> one named output of the model."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        """Run the model and keep one output."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return {self.output: getattr(out, self.output)}


class ImageClassifier(nn.Module):
    """``pixel_values`` -> ``logits``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> dict[str, Any]:
        """Classify a batch of images."""
        return {"logits": self.model(pixel_values=pixel_values).logits}


def example_ids(config: Any, batch: int, length: int) -> torch.Tensor:
    vocab = int(getattr(config, "vocab_size", 100) or 100)
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def causal_lm_graphs(model: Any) -> list[GraphSpec]:
    """``model.onnx`` of a decoder, past keys and values in, presents out.

    Every layer keeps its full past, sliding-window layers too (Gemma 2, Mistral, ...):
    their attention mask hides the keys outside the window, so the logits are those of
    transformers' sliding cache, and every layer's past has one length, which the runtime
    feeds back as it is. The example past is made that way too (an explicit full cache).
    """
    config = model.config
    prompt = example_ids(config, BATCH, PAST)
    with torch.no_grad():
        full = {cache_keyword(model): dynamic_cache([])}
        past = flat(output_cache(model(input_ids=prompt, use_cache=True, **full)).layers)
    ids = example_ids(config, BATCH, SEQUENCE)
    mask = torch.ones(BATCH, PAST + SEQUENCE, dtype=torch.long)
    positions = torch.arange(PAST, PAST + SEQUENCE).expand(BATCH, SEQUENCE)
    dynamic = {
        "input_ids": {0: "batch", 1: "sequence_length"},
        "attention_mask": {0: "batch", 1: "total_sequence_length"},
        "position_ids": {0: "batch", 1: "sequence_length"},
        "past_key_values": [{"key": PAST_DIMS, "value": PAST_DIMS}] * len(past),
    }
    module = CausalLMWithPast(model)
    return [GraphSpec("model.onnx", module, (ids, mask, positions, past), dynamic)]


def text_encoder_graphs(model: Any, output: str) -> list[GraphSpec]:
    ids = example_ids(model.config, BATCH, PAST + SEQUENCE)
    mask = torch.ones(ids.shape, dtype=torch.long)
    dims = {0: "batch", 1: "sequence_length"}
    module = TextEncoder(model, output)
    return [
        GraphSpec("model.onnx", module, (ids, mask), {"input_ids": dims, "attention_mask": dims})
    ]


def image_classifier_graphs(model: Any) -> list[GraphSpec]:
    config = model.config
    size = int(getattr(config, "image_size", 224))
    pixels = torch.randn(BATCH, int(getattr(config, "num_channels", 3)), size, size)
    module = ImageClassifier(model)
    return [GraphSpec("model.onnx", module, (pixels,), {"pixel_values": {0: "batch"}})]
