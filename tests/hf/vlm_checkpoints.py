"""Tiny vision-language checkpoints with their processors, made here (nothing downloaded).

Each family: a random model of hidden size 32 and 2 layers in both towers, images of 30x30
(or the smallest the family takes), a WordLevel tokenizer trained here with the family's
image placeholder as a special token, a chat template that writes the placeholder, and
the family's processor (transformers' PIL image processor), all ``save_pretrained`` into
one folder as a hub checkpoint is laid out.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import torch
import transformers as tf

VOCAB = 96
_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da")
_WORDS = ["user", "assistant", "says", *(a + b for a in _SYLLABLES for b in _SYLLABLES)]
#: A chat template whose content lists write the image placeholder ("{image}").
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} says "
    "{% if m['content'] is string %}{{ m['content'] }} {% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}{image} "
    "{% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}assistant says{% endif %}"
)
_TEXT = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "initializer_range": 0.2,
}
_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": 30,
    "patch_size": 6,
}


def tokenizer(
    image_token: str, extra: tuple[str, ...] = (), named: dict[str, str] | None = None
) -> Any:
    """A fast tokenizer of exactly ``VOCAB`` ids; ``image_token`` (id 4) and ``extra`` special."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    specials = ["<pad>", "<s>", "</s>", "<unk>", image_token, *extra]
    words = _WORDS[: VOCAB - len(specials)]
    model = Tokenizer(models.WordLevel(unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=VOCAB, special_tokens=specials)
    model.train_from_iterator(
        [" ".join(words[i : i + 7]) for i in range(0, len(words), 3)], trainer
    )
    assert model.get_vocab_size() == VOCAB, model.get_vocab_size()
    model.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return tf.PreTrainedTokenizerFast(
        tokenizer_object=model,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens=named or {},
    )


@dataclasses.dataclass(frozen=True)
class VlmCase:
    """One family: its model and processor, saved together."""

    name: str
    build: Callable[[], tuple[Any, Any]]

    def save(self, folder: pathlib.Path, seed: int = 0) -> tuple[Any, Any]:
        """Build the model (with ``seed``) and processor and save both into ``folder``."""
        torch.manual_seed(seed)
        model, processor = self.build()
        model.eval().save_pretrained(folder)
        processor.save_pretrained(folder)
        return model, processor


def _llava() -> tuple[Any, Any]:
    config = tf.LlavaConfig(
        text_config={"model_type": "llama", **_TEXT},
        vision_config={"model_type": "clip_vision_model", **_VISION, "projection_dim": 32},
        image_token_index=4,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=25,
        initializer_range=0.2,
    )
    images = tf.CLIPImageProcessorPil(
        size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}
    )
    processor = tf.LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer("<image>"),
        patch_size=6,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=TEMPLATE.replace("{image}", "<image>"),
    )
    return tf.LlavaForConditionalGeneration(config), processor


def _llava_next() -> tuple[Any, Any]:
    """LLaVA's CLIP tower on 30x30 tiles; any resolution up to 60x60 (1 to 4 tiles and a base
    image), so an image's token count depends on its size and aspect ratio."""
    pinpoints = [[30, 60], [60, 30], [60, 60]]
    config = tf.LlavaNextConfig(
        text_config={"model_type": "llama", **_TEXT, "max_position_embeddings": 512},
        vision_config={"model_type": "clip_vision_model", **_VISION, "projection_dim": 32},
        image_token_index=4,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints,
        initializer_range=0.2,
    )
    images = tf.LlavaNextImageProcessorPil(
        size={"shortest_edge": 30},
        crop_size={"height": 30, "width": 30},
        image_grid_pinpoints=pinpoints,
    )
    processor = tf.LlavaNextProcessor(
        image_processor=images,
        tokenizer=tokenizer("<image>"),
        patch_size=6,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=TEMPLATE.replace("{image}", "<image>"),
    )
    return tf.LlavaNextForConditionalGeneration(config), processor


def _llava_onevision() -> tuple[Any, Any]:
    """LLaVA-NeXT's tiling on a SigLIP tower (25 tokens a tile); at most 1 tile's worth of
    features a grid ("anyres_max_1"), so larger grids are downsampled; one image a prompt is
    tiled, several are padded square, one tile each."""
    pinpoints = [[30, 60], [60, 30], [60, 60]]
    vision = {**_VISION, "model_type": "siglip_vision_model"}
    config = tf.LlavaOnevisionConfig(
        text_config={"model_type": "qwen2", **_TEXT, "max_position_embeddings": 512},
        vision_config=vision,
        image_token_index=4,
        video_token_index=5,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        vision_aspect_ratio="anyres_max_1",
        image_grid_pinpoints=pinpoints,
        initializer_range=0.2,
    )
    images = tf.LlavaOnevisionImageProcessorPil(
        size={"height": 30, "width": 30}, image_grid_pinpoints=pinpoints
    )
    processor = images_only(tf.LlavaOnevisionProcessor)(
        image_processor=images,
        tokenizer=tokenizer("<image>", ("<video>",)),
        num_image_tokens=25,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_1",
        chat_template=TEMPLATE.replace("{image}", "<image>"),
    )
    return tf.LlavaOnevisionForConditionalGeneration(config), processor


def _gemma3() -> tuple[Any, Any]:
    """SigLIP tower on 24x24 images (6x6 patches), pooled to 9 image tokens per image."""
    text = {**_TEXT, "model_type": "gemma3_text", "head_dim": 8, "sliding_window": 4}
    text["tie_word_embeddings"] = False  # a tied head repeats the last token of a random model
    vision = {**_VISION, "model_type": "siglip_vision_model", "image_size": 24, "patch_size": 4}
    config = tf.Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=9,
        image_token_index=4,
        boi_token_index=5,
        eoi_token_index=6,
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    names = {"image_token": "<image_soft_token>", "boi_token": "<boi>", "eoi_token": "<eoi>"}
    processor = tf.Gemma3Processor(
        image_processor=tf.Gemma3ImageProcessorPil(size={"height": 24, "width": 24}),
        tokenizer=tokenizer("<image_soft_token>", ("<boi>", "<eoi>"), names),
        chat_template=TEMPLATE.replace("{image}", "<boi>"),
        image_seq_length=9,
    )
    return tf.Gemma3ForConditionalGeneration(config), processor


def _idefics3_like(
    config_class: Any, images_class: Any, processor_class: Any, model_class: Any, **extra: Any
) -> tuple[Any, Any]:
    """16x16 images (4x4 patches; 1/4 is exact in float32, see the report on arange), 4 tokens.

    Idefics3's architecture, under its own classes or SmolVLM's (``extra``: processor
    arguments only SmolVLM's takes).
    """
    config = config_class(
        text_config={**_TEXT, "model_type": "llama"},
        vision_config={**_VISION, "image_size": 16, "patch_size": 4},
        image_token_id=4,
        scale_factor=2,
        initializer_range=0.2,
    )
    specials = ("<fake_token_around_image>", "<global-img>", "<end_of_utterance>")
    images = images_class(
        do_image_splitting=False, size={"longest_edge": 32}, max_image_size={"longest_edge": 16}
    )
    processor = processor_class(
        image_processor=images,
        tokenizer=tokenizer("<image>", specials),
        image_seq_len=4,
        chat_template=TEMPLATE.replace("{image}", "<image>"),
        **extra,
    )
    return model_class(config), processor


def _idefics3() -> tuple[Any, Any]:
    return _idefics3_like(
        tf.Idefics3Config,
        tf.Idefics3ImageProcessorPil,
        tf.Idefics3Processor,
        tf.Idefics3ForConditionalGeneration,
    )


def _smolvlm() -> tuple[Any, Any]:
    """SmolVLM's config and processor (images only: its video processor needs torchvision)."""
    return _idefics3_like(
        tf.SmolVLMConfig,
        tf.SmolVLMImageProcessorPil,
        images_only(tf.SmolVLMProcessor),
        tf.SmolVLMForConditionalGeneration,
        video_processor=None,
    )


def _mistral3() -> tuple[Any, Any]:
    """Pixtral tower (4x4 patches, merged 2x2) on images up to 48 pixels a side; a Mistral
    decoder. Its processor needs torchvision: the reference is ``pixtral_reference.py``."""
    from tests.hf.pixtral_reference import TOKENS, PixtralReference

    vision = {
        **_VISION, "model_type": "pixtral", "image_size": 48, "patch_size": 4, "head_dim": 8,
    }  # fmt: skip
    config = tf.Mistral3Config(
        text_config={**_TEXT, "model_type": "mistral", "head_dim": 8},
        vision_config=vision,
        image_token_index=4,
        spatial_merge_size=2,
        vision_feature_layer=-1,
        initializer_range=0.2,
    )
    specials = (TOKENS["image_break_token"], TOKENS["image_end_token"])
    processor = PixtralReference(
        tf.PixtralImageProcessorPil(size={"longest_edge": 48}, patch_size=4),
        tokenizer(TOKENS["image_token"], specials),
        patch_size=4,
        merge=2,
        chat_template=TEMPLATE.replace("{image}", TOKENS["image_token"]),
    )
    return tf.Mistral3ForConditionalGeneration(config), processor


def images_only(processor: type) -> type:
    """``processor`` without its video processor (transformers' needs torchvision)."""

    class ImagesOnly(processor):  # type: ignore[misc, valid-type]
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

        def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any:
            """The base class's: SmolVLM's only adds its video processor's frame settings."""
            return tf.ProcessorMixin.apply_chat_template(self, conversation, *args, **kwargs)

    ImagesOnly.__name__ = ImagesOnly.__qualname__ = processor.__name__
    return ImagesOnly


def _qwen_vl(version: str) -> tuple[Any, Any]:
    """4x4 patches merged 2x2 (8-pixel multiples, 16x16 to 48x48 pixels): M-RoPE of 2+1+1."""
    text = {
        **_TEXT,
        "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 1e4},
    }
    vision = {
        "depth": 2, "hidden_size": 32, "num_heads": 4, "patch_size": 4, "in_channels": 3,
        "temporal_patch_size": 2, "spatial_merge_size": 2, "initializer_range": 0.2,
    }  # fmt: skip
    ids = {"image_token_id": 4, "vision_start_token_id": 5, "vision_end_token_id": 6}
    ids["video_token_id"] = 7
    if version == "2.5":  # windows of 2x2 merged patches; the second block attends fully
        vision |= {"out_hidden_size": 32, "intermediate_size": 64, "window_size": 16}
        vision["fullatt_block_indexes"] = [1]
        config: Any = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
        model: Any = tf.Qwen2_5_VLForConditionalGeneration(config)
        processor = images_only(tf.Qwen2_5_VLProcessor)
    else:
        vision |= {"embed_dim": 32, "mlp_ratio": 2}
        config = tf.Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
        model = tf.Qwen2VLForConditionalGeneration(config)
        processor = images_only(tf.Qwen2VLProcessor)
    images = tf.Qwen2VLImageProcessorPil(
        patch_size=4,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": 16 * 16, "longest_edge": 48 * 48},
    )
    specials = ("<|vision_start|>", "<|vision_end|>", "<|video_pad|>")
    placeholder = "<|vision_start|><|image_pad|><|vision_end|>"
    return model, processor(
        image_processor=images,
        tokenizer=tokenizer("<|image_pad|>", specials),
        chat_template=TEMPLATE.replace("{image}", placeholder),
    )


VLM_CASES = {
    case.name: case
    for case in (
        VlmCase("llava", _llava),
        VlmCase("llava_next", _llava_next),
        VlmCase("llava_onevision", _llava_onevision),
        VlmCase("gemma3", _gemma3),
        VlmCase("idefics3", _idefics3),
        VlmCase("smolvlm", _smolvlm),
        VlmCase("mistral3", _mistral3),
        VlmCase("qwen2_vl", lambda: _qwen_vl("2")),
        VlmCase("qwen2_5_vl", lambda: _qwen_vl("2.5")),
    )
}
