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

__all__ = ["GraphSpec", "graphs_for_task"]

_BATCH, _SEQUENCE, _PAST = 2, 3, 4
_PAST_DIMS = {0: "batch", 2: "past_sequence_length"}


@dataclasses.dataclass(frozen=True)
class GraphSpec:
    """One ONNX file to write: the module, its example inputs, its dynamic dimensions."""

    file_name: str
    module: nn.Module
    args: tuple[Any, ...]
    dynamic_shapes: dict[str, Any]


def _accepts(model: nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def _cache_keyword(model: nn.Module) -> str:
    """``cache`` on transformers >= 5.2x, ``past_key_values`` before."""
    return "cache" if _accepts(model, "cache") else "past_key_values"


def _output_cache(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _flat(layers: Any) -> list[dict[str, torch.Tensor]]:
    return [{"key": layer.keys, "value": layer.values} for layer in layers]


def _dynamic_cache(past_key_values: list[dict[str, torch.Tensor]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(kv["key"], kv["value"]) for kv in past_key_values])


class CausalLMWithPast(nn.Module):
    """A causal LM called with its past keys and values flat; returns logits and presents."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.cache_keyword = _cache_keyword(model)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One step: the prompt (past length 0) or the next tokens."""
        cache = _dynamic_cache(past_key_values)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self.cache_keyword: cache},
        )
        return {"logits": out.logits, "present": _flat(_output_cache(out).layers)}


class Seq2SeqDecoderWithPast(nn.Module):
    """The decoder of an encoder-decoder model with its self-attention past flat.

    Cross-attention keys and values are computed from ``encoder_hidden_states`` at every
    step (one graph for all steps, no cross-attention cache to carry).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.cache_keyword = _cache_keyword(model)

    def step(
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
        **extra: Any,
    ) -> dict[str, Any]:
        """One decoder step given the encoder's output."""
        from transformers import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(_dynamic_cache(past_key_values), DynamicCache())
        out = self.model(
            decoder_input_ids=input_ids,
            encoder_outputs=(encoder_hidden_states,),
            use_cache=True,
            **extra,
            **{self.cache_keyword: cache},
        )
        return {
            "logits": out.logits,
            "present": _flat(_output_cache(out).self_attention_cache.layers),
        }

    def forward(
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One decoder step of a text encoder-decoder (T5, BART)."""
        return self.step(
            input_ids, encoder_hidden_states, past_key_values, attention_mask=encoder_attention_mask
        )


class SpeechDecoderWithPast(Seq2SeqDecoderWithPast):
    """Whisper's decoder: no encoder mask (the audio features have a fixed length)."""

    def forward(  # type: ignore[override]  # no encoder mask
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One decoder step of a speech encoder-decoder (Whisper)."""
        return self.step(input_ids, encoder_hidden_states, past_key_values)


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


class AudioEncoder(nn.Module):
    """``input_features`` -> ``last_hidden_state`` (Whisper's encoder)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features: torch.Tensor) -> dict[str, Any]:
        """Encode a batch of log-mel features."""
        return {"last_hidden_state": self.encoder(input_features=input_features).last_hidden_state}


def _ids(config: Any, batch: int, length: int) -> torch.Tensor:
    vocab = int(getattr(config, "vocab_size", 100) or 100)
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def _causal_lm(model: Any) -> list[GraphSpec]:
    config = model.config
    prompt = _ids(config, _BATCH, _PAST)
    with torch.no_grad():
        past = _flat(_output_cache(model(input_ids=prompt, use_cache=True)).layers)
    ids = _ids(config, _BATCH, _SEQUENCE)
    mask = torch.ones(_BATCH, _PAST + _SEQUENCE, dtype=torch.long)
    positions = torch.arange(_PAST, _PAST + _SEQUENCE).expand(_BATCH, _SEQUENCE)
    dynamic = {
        "input_ids": {0: "batch", 1: "sequence_length"},
        "attention_mask": {0: "batch", 1: "total_sequence_length"},
        "position_ids": {0: "batch", 1: "sequence_length"},
        "past_key_values": [{"key": _PAST_DIMS, "value": _PAST_DIMS}] * len(past),
    }
    module = CausalLMWithPast(model)
    return [GraphSpec("model.onnx", module, (ids, mask, positions, past), dynamic)]


def _encoder_input(model: Any) -> tuple[str, torch.Tensor, dict[int, str]]:
    """The encoder's input of an encoder-decoder model: token ids or audio features."""
    config = model.config
    if _accepts(model, "input_features"):
        frames = 2 * int(config.max_source_positions)
        features = torch.randn(_BATCH, int(config.num_mel_bins), frames)
        return "input_features", features, {0: "batch"}
    return "input_ids", _ids(config, _BATCH, _PAST + 2), {0: "batch", 1: "encoder_sequence_length"}


def _seq2seq(model: Any) -> list[GraphSpec]:
    name, encoder_input, dims = _encoder_input(model)
    encoder = model.get_encoder()
    mask = torch.ones(encoder_input.shape[:2], dtype=torch.long)
    encoder_module: nn.Module
    if name == "input_ids":
        encoder_module = TextEncoder(encoder, "last_hidden_state")
        encoder_spec = GraphSpec(
            "encoder_model.onnx",
            encoder_module,
            (encoder_input, mask),
            {"input_ids": dims, "attention_mask": dims},
        )
    else:
        encoder_module = AudioEncoder(encoder)
        encoder_spec = GraphSpec(
            "encoder_model.onnx", encoder_module, (encoder_input,), {"input_features": dims}
        )
    with torch.no_grad():
        hidden = encoder_module(*encoder_spec.args)["last_hidden_state"]
        out = model(
            **{name: encoder_input},
            decoder_input_ids=_ids(model.config, _BATCH, _PAST),
            use_cache=True,
        )
    past = _flat(_output_cache(out).self_attention_cache.layers)
    ids = _ids(model.config, _BATCH, _SEQUENCE)
    # In forward's parameter order (torch.onnx.export reads dynamic_shapes by position).
    past_dims = [{"key": _PAST_DIMS, "value": _PAST_DIMS}] * len(past)
    decoder: nn.Module
    if name == "input_ids":
        encoder_dims = {0: "batch", 1: "encoder_sequence_length"}
        dynamic: dict[str, Any] = {
            "input_ids": {0: "batch", 1: "sequence_length"},
            "encoder_hidden_states": encoder_dims,
            "encoder_attention_mask": encoder_dims,
            "past_key_values": past_dims,
        }
        decoder = Seq2SeqDecoderWithPast(model)
        args: tuple[Any, ...] = (ids, hidden, mask, past)
    else:
        dynamic = {
            "input_ids": {0: "batch", 1: "sequence_length"},
            "encoder_hidden_states": {0: "batch"},
            "past_key_values": past_dims,
        }
        decoder = SpeechDecoderWithPast(model)
        args = (ids, hidden, past)
    return [encoder_spec, GraphSpec("decoder_model.onnx", decoder, args, dynamic)]


def _text_encoder(model: Any, output: str) -> list[GraphSpec]:
    ids = _ids(model.config, _BATCH, _PAST + _SEQUENCE)
    mask = torch.ones(ids.shape, dtype=torch.long)
    dims = {0: "batch", 1: "sequence_length"}
    module = TextEncoder(model, output)
    return [
        GraphSpec("model.onnx", module, (ids, mask), {"input_ids": dims, "attention_mask": dims})
    ]


def _image_classifier(model: Any) -> list[GraphSpec]:
    config = model.config
    size = int(getattr(config, "image_size", 224))
    pixels = torch.randn(_BATCH, int(getattr(config, "num_channels", 3)), size, size)
    module = ImageClassifier(model)
    return [GraphSpec("model.onnx", module, (pixels,), {"pixel_values": {0: "batch"}})]


def graphs_for_task(model: Any, task: str) -> list[GraphSpec]:
    """The graphs that make up ``task``'s exported folder, for ``model`` in eval mode."""
    if task == "text-generation":
        return _causal_lm(model)
    if task in ("text2text-generation", "automatic-speech-recognition"):
        return _seq2seq(model)
    if task == "feature-extraction":
        return _text_encoder(model, "last_hidden_state")
    if task == "text-classification":
        return _text_encoder(model, "logits")
    if task == "image-classification":
        return _image_classifier(model)
    raise ValueError(f"no graphs for task {task!r}")  # resolve_task let an unknown task in
