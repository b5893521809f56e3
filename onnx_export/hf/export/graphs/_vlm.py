"""The three graphs of a vision-language model (LLaVA & co.), for ``image-text-to-text``.

Qwen2-VL and Qwen2.5-VL (M-RoPE) have the same three files with other inputs: see
``_qwen_vl.py``.

- ``vision_encoder.onnx``: ``pixel_values`` (images, channels, height, width) ->
  ``image_features`` (images, tokens per image, hidden): the vision tower, the layer and
  token selection the family does, and the projector into the language model's space.
- ``embed_tokens.onnx``: ``input_ids`` -> ``inputs_embeds``, the language model's token
  embedding (with the scale families such as Gemma multiply it by).
- ``decoder_model.onnx``: ``inputs_embeds``, ``attention_mask``, ``position_ids`` and
  ``past_key_values.{i}.key`` / ``.value`` -> ``logits`` and ``present.{i}.*``, the
  text-generation decoder graph (``graphs/_base.py``) fed embeddings instead of ids.

The runtime embeds the prompt, writes each image's features over its image tokens
(numpy, in order, as transformers' ``masked_scatter`` does) and decodes; every later step
embeds its one new token. Nothing in the graphs depends on where the image tokens are.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from onnx_export.capture.patches._transformers_masks import masks_without_vmap
from onnx_export.hf.export.graphs._base import (
    BATCH,
    PAST,
    PAST_DIMS,
    SEQUENCE,
    CausalLMWithPast,
    GraphSpec,
    accepts,
    example_ids,
)
from onnx_export.hf.export.graphs._qwen_vl import MROPE_FAMILIES, qwen_vl_graphs
from onnx_export.hf.export.graphs._vision import example_pixels

__all__ = [
    "VLM_FILES",
    "vlm_graphs",
    "ImageEncoder",
    "TokenEmbedding",
    "EmbedsDecoderWithPast",
    "EmbedsDecoderWithTypes",
]

#: The files of an ``image-text-to-text`` folder, in the order they run.
VLM_FILES = ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model.onnx")


def _as_batch(features: Any) -> torch.Tensor:
    """Image features as one (images, tokens, hidden) tensor (families return a list or one)."""
    if isinstance(features, (list, tuple)):
        return torch.stack(list(features))
    tensor: torch.Tensor = features
    return tensor.unsqueeze(0) if tensor.dim() == 2 else tensor  # 2-D: one image


def _llava_features(model: Any, pixel_values: torch.Tensor) -> torch.Tensor:
    """LLaVA's ``get_image_features`` without its split into a list (which fixes the batch)."""
    inner, config = model.model, model.config
    out = inner.vision_tower(pixel_values, output_hidden_states=True, return_dict=True)
    layers = config.vision_feature_layer
    picked = [out.hidden_states[i] for i in ([layers] if isinstance(layers, int) else layers)]
    if config.vision_feature_select_strategy == "default":
        picked = [hidden[:, 1:] for hidden in picked]  # the CLS token is not an image token
    return inner.multi_modal_projector(torch.cat(picked, dim=-1))  # type: ignore[no-any-return]


def _idefics3_features(model: Any, pixel_values: torch.Tensor) -> torch.Tensor:
    """Idefics3's vision model and connector on whole images (no padding image, no mask)."""
    inner = model.model
    patch = int(model.config.vision_config.patch_size)
    count, _, height, width = pixel_values.shape
    full = torch.ones(count, height // patch, width // patch, dtype=torch.bool)
    out = inner.vision_model(pixel_values=pixel_values, patch_attention_mask=full)
    return inner.connector(out.last_hidden_state)  # type: ignore[no-any-return]


def _mistral3_features(model: Any, pixel_values: torch.Tensor) -> torch.Tensor:
    """Mistral 3's Pixtral tower and patch merger on one image of any size (no padding)."""
    inner, layers = model.model, model.config.vision_feature_layer
    sizes = [(pixel_values.shape[2], pixel_values.shape[3])]  # symbolic: from the shape
    out = inner.vision_tower(
        pixel_values, image_sizes=sizes, output_hidden_states=True, return_dict=True
    )
    picked = [out.hidden_states[i] for i in ([layers] if isinstance(layers, int) else layers)]
    features = inner.multi_modal_projector(torch.cat(picked, dim=-1).squeeze(0), sizes)
    return features.unsqueeze(0)  # type: ignore[no-any-return]


#: model_type -> how the family computes its image features, one row per image.
_FEATURES = {
    "llava": _llava_features,
    "llava_next": _llava_features,  # per tile; the runtime packs the tiles (any resolution)
    "llava_onevision": _llava_features,
    "idefics3": _idefics3_features,
    "smolvlm": _idefics3_features,  # Idefics3's architecture
    "mistral3": _mistral3_features,
}

#: Families whose vision encoder takes one image of any size (height, width dynamic).
_SIZED = ("mistral3",)


class ImageEncoder(nn.Module):
    """``pixel_values`` -> ``image_features``: the family's vision tower and projector."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.features = _FEATURES.get(str(getattr(model.config, "model_type", "")))

    def forward(self, pixel_values: torch.Tensor) -> dict[str, Any]:
        """The projected features of each image, one row per image."""
        if self.features is not None:
            out = {"image_features": self.features(self.model, pixel_values)}
            newline = getattr(getattr(self.model, "model", None), "image_newline", None)
            if newline is not None:  # LLaVA-NeXT: the row the runtime ends each line with
                out["image_newline"] = newline
            return out
        out = self.model.get_image_features(pixel_values=pixel_values, return_dict=True)  # type: ignore[operator]
        return {"image_features": _as_batch(getattr(out, "pooler_output", out))}


class TokenEmbedding(nn.Module):
    """``input_ids`` -> ``inputs_embeds``: the language model's input embedding."""

    def __init__(self, embedding: nn.Module) -> None:
        super().__init__()
        self.embedding = embedding

    def forward(self, input_ids: torch.Tensor) -> dict[str, Any]:
        """Embed the tokens."""
        return {"inputs_embeds": self.embedding(input_ids)}


class EmbedsDecoderWithPast(CausalLMWithPast):
    """The whole model on ``inputs_embeds`` with its past flat; returns logits and presents."""

    def forward(  # embeddings in, not token ids
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One step: the prompt's embeddings (past length 0) or the next token's."""
        return self.step(
            past_key_values,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
        )


class EmbedsDecoderWithTypes(EmbedsDecoderWithPast):
    """:class:`EmbedsDecoderWithPast` with ``token_type_ids`` (1 on image tokens), Gemma 3's.

    Gemma 3 lets an image's tokens attend to each other both ways in the prompt; the
    types cover the whole sequence (the attention mask's length): zeros on later steps,
    whose one new token is text.
    """

    def forward(  # type: ignore[override]  # one more input
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """One step, the image blocks of the sequence marked in ``token_type_ids``."""
        with masks_without_vmap():  # also applied by capture; explicit for this wrapper
            return self.step(
                past_key_values,
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                position_ids=position_ids,
                token_type_ids=token_type_ids,
            )


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else getattr(config, "text_config", config)


def vlm_graphs(model: Any) -> list[GraphSpec]:
    """The vision encoder, the token embedding and the decoder of a vision-language model."""
    config = model.config
    text = _text_config(config)
    embedding = model.get_input_embeddings()
    ids = example_ids(text, BATCH, PAST + SEQUENCE)
    embed = GraphSpec(
        "embed_tokens.onnx",
        TokenEmbedding(embedding),
        (ids,),
        {"input_ids": {0: "batch", 1: "sequence_length"}},
    )
    if str(getattr(config, "model_type", "")) in MROPE_FAMILIES:
        return qwen_vl_graphs(model, EmbedsDecoderWithPast(model), embed)
    pixels = example_pixels(config)
    images: dict[str, Any] = {"pixel_values": {0: "batch"}}
    if str(getattr(config, "model_type", "")) in _SIZED:  # 2 x 3 merged patches, any size
        side = int(config.vision_config.patch_size) * int(config.spatial_merge_size)
        pixels = torch.randn(1, pixels.shape[1], 2 * side, 3 * side)
        images = {"pixel_values": {2: "height", 3: "width"}}
    encoder = GraphSpec("vision_encoder.onnx", ImageEncoder(model), (pixels,), images)
    typed = accepts(model, "token_type_ids")
    decoder = EmbedsDecoderWithTypes(model) if typed else EmbedsDecoderWithPast(model)
    with torch.no_grad():
        prompt = embedding(example_ids(text, BATCH, PAST))
        mask = torch.ones(BATCH, PAST, dtype=torch.long)
        positions = torch.arange(PAST).expand(BATCH, PAST)
        types = (torch.zeros(BATCH, PAST, dtype=torch.long),) if typed else ()
        past = decoder(prompt, mask, positions, *types, [])["present"]
        step = embedding(example_ids(text, BATCH, SEQUENCE))
    mask = torch.ones(BATCH, PAST + SEQUENCE, dtype=torch.long)
    positions = torch.arange(PAST, PAST + SEQUENCE).expand(BATCH, SEQUENCE)
    dynamic: dict[str, Any] = {
        "inputs_embeds": {0: "batch", 1: "sequence_length"},
        "attention_mask": {0: "batch", 1: "total_sequence_length"},
        "position_ids": {0: "batch", 1: "sequence_length"},
    }
    args: tuple[Any, ...] = (step, mask, positions)
    if typed:  # two of the new tokens are an image block
        types_all = torch.zeros(BATCH, PAST + SEQUENCE, dtype=torch.long)
        types_all[:, PAST : PAST + 2] = 1
        dynamic["token_type_ids"] = {0: "batch", 1: "total_sequence_length"}
        args += (types_all,)
    dynamic["past_key_values"] = [{"key": PAST_DIMS, "value": PAST_DIMS}] * len(past)
    spec = GraphSpec("decoder_model.onnx", decoder, (*args, past), dynamic)
    return [encoder, embed, spec]
