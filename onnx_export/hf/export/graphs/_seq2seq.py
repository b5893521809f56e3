"""The two graphs of an encoder-decoder model (T5, BART, Whisper).

The encoder graph returns the encoder's output and, for every decoder layer, the
cross-attention keys and values computed from it (``encoder_key_values.{i}.key`` /
``.value``): it runs the decoder once on a placeholder token inside the graph, which
fills ``transformers``' cross-attention cache without naming any layer. The decoder graph
takes them back as inputs, so no step recomputes them, and carries its self-attention
cache as ``past_key_values.{i}.*`` -> ``present.{i}.*``, from past length 0.
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
    accepts,
    cache_keyword,
    dynamic_cache,
    example_ids,
    flat,
    output_cache,
)

__all__ = ["seq2seq_graphs"]

KeyValues = list[dict[str, torch.Tensor]]


class _Seq2SeqEncoder(nn.Module):
    """The encoder plus the cross-attention keys and values of every decoder layer."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.cache_keyword = cache_keyword(model)

    def with_cross(self, hidden: torch.Tensor, **extra: Any) -> dict[str, Any]:
        """``last_hidden_state`` and ``encoder_key_values`` for the encoder output."""
        from transformers import DynamicCache, EncoderDecoderCache

        placeholder = torch.zeros((hidden.shape[0], 1), dtype=torch.long, device=hidden.device)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self.model(
            decoder_input_ids=placeholder,
            encoder_outputs=(hidden,),
            use_cache=True,
            **extra,
            **{self.cache_keyword: cache},
        )
        cross = flat(output_cache(out).cross_attention_cache.layers)
        return {"last_hidden_state": hidden, "encoder_key_values": cross}


class TextSeq2SeqEncoder(_Seq2SeqEncoder):
    """T5 and BART: ``input_ids``, ``attention_mask`` -> hidden states, cross keys/values."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        """Encode once per generation."""
        encoder = self.model.get_encoder()  # type: ignore[operator]
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.with_cross(hidden, attention_mask=attention_mask)


class SpeechSeq2SeqEncoder(_Seq2SeqEncoder):
    """Whisper: ``input_features`` -> hidden states, cross keys/values."""

    def forward(self, input_features: torch.Tensor) -> dict[str, Any]:
        """Encode once per generation."""
        encoder = self.model.get_encoder()  # type: ignore[operator]
        return self.with_cross(encoder(input_features=input_features).last_hidden_state)


class Seq2SeqDecoderWithPast(nn.Module):
    """One decoder step: self-attention past flat, cross-attention keys/values as inputs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.cache_keyword = cache_keyword(model)

    def step(
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_key_values: KeyValues,
        encoder_key_values: KeyValues,
        **extra: Any,
    ) -> dict[str, Any]:
        """One decoder step; the cross-attention cache is full, so it is only read."""
        from transformers import EncoderDecoderCache

        cache = EncoderDecoderCache(
            dynamic_cache(past_key_values), dynamic_cache(encoder_key_values)
        )
        out = self.model(
            decoder_input_ids=input_ids,
            encoder_outputs=(encoder_hidden_states,),
            use_cache=True,
            **extra,
            **{self.cache_keyword: cache},
        )
        return {
            "logits": out.logits,
            "present": flat(output_cache(out).self_attention_cache.layers),
        }

    def forward(
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        past_key_values: KeyValues,
        encoder_key_values: KeyValues,
    ) -> dict[str, Any]:
        """One decoder step of a text encoder-decoder (T5, BART)."""
        return self.step(
            input_ids,
            encoder_hidden_states,
            past_key_values,
            encoder_key_values,
            attention_mask=encoder_attention_mask,
        )


class SpeechDecoderWithPast(Seq2SeqDecoderWithPast):
    """Whisper's decoder: no encoder mask (the audio features have a fixed length)."""

    def forward(  # type: ignore[override]  # no encoder mask
        self,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_key_values: KeyValues,
        encoder_key_values: KeyValues,
    ) -> dict[str, Any]:
        """One decoder step of a speech encoder-decoder (Whisper)."""
        return self.step(input_ids, encoder_hidden_states, past_key_values, encoder_key_values)


class VisionSeq2SeqEncoder(_Seq2SeqEncoder):
    """Vision encoder-decoder (image captioning, OCR): ``pixel_values`` -> hidden states."""

    def forward(self, pixel_values: torch.Tensor) -> dict[str, Any]:
        """Encode the images once per generation."""
        encoder = self.model.get_encoder()  # type: ignore[operator]
        return self.with_cross(encoder(pixel_values=pixel_values).last_hidden_state)


def _encoder_spec(model: Any) -> GraphSpec:
    config = model.config
    if accepts(model, "pixel_values"):
        from onnx_export.hf.export.graphs._vision import example_pixels

        pixels = example_pixels(config)
        vision = VisionSeq2SeqEncoder(model)
        return GraphSpec("encoder_model.onnx", vision, (pixels,), {"pixel_values": {0: "batch"}})
    if accepts(model, "input_features"):
        frames = 2 * int(config.max_source_positions)
        features = torch.randn(BATCH, int(config.num_mel_bins), frames)
        module: nn.Module = SpeechSeq2SeqEncoder(model)
        return GraphSpec(
            "encoder_model.onnx", module, (features,), {"input_features": {0: "batch"}}
        )
    ids = example_ids(config, BATCH, PAST + 2)
    mask = torch.ones(ids.shape, dtype=torch.long)
    dims = {0: "batch", 1: "encoder_sequence_length"}
    module = TextSeq2SeqEncoder(model)
    return GraphSpec(
        "encoder_model.onnx", module, (ids, mask), {"input_ids": dims, "attention_mask": dims}
    )


def seq2seq_graphs(model: Any) -> list[GraphSpec]:
    """``encoder_model.onnx`` and ``decoder_model.onnx`` of an encoder-decoder model."""
    encoder = _encoder_spec(model)
    text = isinstance(encoder.module, TextSeq2SeqEncoder)
    with torch.no_grad():
        encoded = encoder.module(*encoder.args)
        hidden, cross = encoded["last_hidden_state"], encoded["encoder_key_values"]
        start = example_ids(model.config, BATCH, PAST)
        kwargs = {"attention_mask": encoder.args[1]} if text else {}
        step = Seq2SeqDecoderWithPast(model).step(start, hidden, [], cross, **kwargs)
    past = step["present"]
    ids = example_ids(model.config, BATCH, SEQUENCE)
    # In forward's parameter order (torch.onnx.export reads dynamic_shapes by position).
    encoder_dims = {0: "batch", 1: "encoder_sequence_length"} if text else {0: "batch"}
    cross_dims = {0: "batch", 2: "encoder_sequence_length"} if text else {0: "batch"}
    dynamic: dict[str, Any] = {
        "input_ids": {0: "batch", 1: "sequence_length"},
        "encoder_hidden_states": encoder_dims,
    }
    if text:
        dynamic["encoder_attention_mask"] = encoder_dims
    dynamic["past_key_values"] = [{"key": PAST_DIMS, "value": PAST_DIMS}] * len(past)
    dynamic["encoder_key_values"] = [{"key": cross_dims, "value": cross_dims}] * len(cross)
    if text:
        decoder: nn.Module = Seq2SeqDecoderWithPast(model)
        args: tuple[Any, ...] = (ids, hidden, encoder.args[1], past, cross)
    else:
        decoder = SpeechDecoderWithPast(model)
        args = (ids, hidden, past, cross)
    return [encoder, GraphSpec("decoder_model.onnx", decoder, args, dynamic)]
