"""Tiny checkpoints of every task but generation: one case per architecture and task.

Each case builds a transformers model from a small config (random weights) with the Auto
class of its task; ``CI`` names the subset that runs without ``--runslow`` (one model per
task and per family). ``tests/hf/make_architecture_docs.py`` writes
``docs/huggingface-architectures.md`` from this table and ``checkpoints.CASES``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import torch
import transformers as tf

VOCAB = 96
_TEXT = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "pad_token_id": 0,
}
_VISION = {"image_size": 32, "num_channels": 3, "num_labels": 5}
_VIT = {
    **_VISION,
    "patch_size": 8,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}
_AUDIO = {
    "vocab_size": 32,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "conv_dim": (16, 16),
    "conv_stride": (5, 4),
    "conv_kernel": (10, 4),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "num_labels": 4,
    "pad_token_id": 0,
}

_AUTO = {
    "feature-extraction": "AutoModel",
    "sentence-similarity": "AutoModel",
    "fill-mask": "AutoModelForMaskedLM",
    "text-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "multiple-choice": "AutoModelForMultipleChoice",
    "image-classification": "AutoModelForImageClassification",
    "semantic-segmentation": "AutoModelForSemanticSegmentation",
    "object-detection": "AutoModelForObjectDetection",
    "depth-estimation": "AutoModelForDepthEstimation",
    "audio-classification": "AutoModelForAudioClassification",
    "automatic-speech-recognition": "AutoModelForCTC",
    "zero-shot-image-classification": "AutoModelForZeroShotImageClassification",
}


@dataclasses.dataclass(frozen=True)
class TaskCase:
    """One architecture and task: its config."""

    name: str
    task: str
    config: Callable[[], Any]
    family: str
    model_class: str | None = None  # when the Auto class maps to several

    def build(self) -> Any:
        """The model, with random weights."""
        if self.task == "image-to-text":
            return tf.VisionEncoderDecoderModel(config=self.config())
        if self.model_class is not None:
            return getattr(tf, self.model_class)(self.config())
        return getattr(tf, _AUTO[self.task]).from_config(self.config())

    def save(self, folder: pathlib.Path, seed: int = 0) -> Any:
        """Build the model with ``seed`` and ``save_pretrained`` it into ``folder``."""
        torch.manual_seed(seed)
        model = self.build().eval()
        model.save_pretrained(folder)
        return model


def _cfg(model_type: str, **kwargs: Any) -> Callable[[], Any]:
    return lambda: tf.AutoConfig.for_model(model_type, **kwargs)


def _text(model_type: str, **extra: Any) -> Callable[[], Any]:
    return _cfg(model_type, **{**_TEXT, "num_labels": 3, **extra})


def _ved() -> Any:
    encoder = tf.ViTConfig(**_VIT)
    decoder = tf.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True
    )
    config = tf.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id = 1
    config.pad_token_id = 0
    config.eos_token_id = None
    return config


def _detr(model_type: str) -> Callable[[], Any]:
    backbone = tf.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"]
    )
    return _cfg(
        model_type,
        use_timm_backbone=False,
        backbone_config=backbone,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=6,
        num_labels=4,
    )


_MPNET = {k: v for k, v in _TEXT.items() if k != "type_vocab_size"}
_DISTIL = {
    "vocab_size": VOCAB,
    "dim": 32,
    "hidden_dim": 64,
    "n_layers": 2,
    "n_heads": 4,
    "max_position_embeddings": 64,
    "num_labels": 3,
}
_CLIP_TEXT = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 16,
}

_CASES = (
    # Text encoders
    TaskCase("bert", "fill-mask", _text("bert"), "encoder"),
    TaskCase("bert", "question-answering", _text("bert", num_labels=2), "encoder"),
    TaskCase("bert", "multiple-choice", _text("bert"), "encoder"),
    TaskCase("bert", "token-classification", _text("bert"), "encoder"),
    TaskCase("bert", "sentence-similarity", _text("bert"), "encoder"),
    TaskCase("albert", "fill-mask", _text("albert", embedding_size=16), "encoder"),
    TaskCase("albert", "text-classification", _text("albert", embedding_size=16), "encoder"),
    TaskCase("electra", "token-classification", _text("electra", embedding_size=16), "encoder"),
    TaskCase("electra", "question-answering", _text("electra", num_labels=2), "encoder"),
    TaskCase("deberta", "text-classification", _text("deberta"), "encoder"),
    TaskCase("deberta-v2", "fill-mask", _text("deberta-v2"), "encoder"),
    TaskCase("deberta-v2", "multiple-choice", _text("deberta-v2"), "encoder"),
    TaskCase("mpnet", "fill-mask", _cfg("mpnet", **_MPNET, num_labels=3), "encoder"),
    TaskCase("mpnet", "sentence-similarity", _cfg("mpnet", **_MPNET), "encoder"),
    TaskCase("roformer", "fill-mask", _text("roformer", embedding_size=32), "encoder"),
    TaskCase("roberta", "token-classification", _text("roberta", pad_token_id=1), "encoder"),
    TaskCase("xlm-roberta", "fill-mask", _text("xlm-roberta", pad_token_id=1), "encoder"),
    TaskCase("camembert", "text-classification", _text("camembert", pad_token_id=1), "encoder"),
    TaskCase(
        "distilbert",
        "question-answering",
        _cfg("distilbert", **{**_DISTIL, "num_labels": 2}),
        "encoder",
    ),
    TaskCase("ernie", "fill-mask", _text("ernie"), "encoder"),
    TaskCase("ibert", "fill-mask", _text("ibert", pad_token_id=1), "encoder"),
    TaskCase("megatron-bert", "fill-mask", _text("megatron-bert"), "encoder"),
    TaskCase("convbert", "fill-mask", _text("convbert", embedding_size=32), "encoder"),
    TaskCase("data2vec-text", "fill-mask", _text("data2vec-text", pad_token_id=1), "encoder"),
    TaskCase("esm", "fill-mask", _cfg("esm", **_MPNET, mask_token_id=4), "encoder"),
    TaskCase("squeezebert", "fill-mask", _text("squeezebert", embedding_size=32), "encoder"),
    TaskCase(
        "rembert",
        "fill-mask",
        _text("rembert", input_embedding_size=16, output_embedding_size=16),
        "encoder",
    ),
    # Decoders as classifiers
    TaskCase("llama", "text-classification", _cfg("llama", **_MPNET, num_labels=3), "decoder"),
    # Vision
    TaskCase("vit", "feature-extraction", _cfg("vit", **_VIT), "vision"),
    TaskCase(
        "deit", "image-classification", _cfg("deit", **_VIT), "vision", "DeiTForImageClassification"
    ),
    TaskCase("beit", "image-classification", _cfg("beit", **_VIT), "vision"),
    TaskCase("dinov2", "image-classification", _cfg("dinov2", **_VIT), "vision"),
    TaskCase(
        "resnet",
        "image-classification",
        _cfg("resnet", **_VISION, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]),
        "vision",
    ),
    TaskCase(
        "regnet",
        "image-classification",
        _cfg(
            "regnet",
            **_VISION,
            embedding_size=8,
            hidden_sizes=[8, 16],
            depths=[1, 1],
            groups_width=8,
        ),
        "vision",
    ),
    TaskCase(
        "convnextv2",
        "image-classification",
        _cfg("convnextv2", **_VISION, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2),
        "vision",
    ),
    TaskCase(
        "mobilevit",
        "image-classification",
        _cfg(
            "mobilevit",
            **_VISION,
            hidden_sizes=[16, 16, 16],
            neck_hidden_sizes=[8, 8, 8, 8, 8, 8, 16],
            num_attention_heads=2,
        ),
        "vision",
    ),
    TaskCase(
        "poolformer",
        "image-classification",
        _cfg("poolformer", **_VISION, hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1]),
        "vision",
    ),
    TaskCase(
        "segformer",
        "semantic-segmentation",
        _cfg(
            "segformer",
            **_VISION,
            hidden_sizes=[8, 16, 16, 16],
            depths=[1, 1, 1, 1],
            num_attention_heads=[1, 1, 2, 2],
            decoder_hidden_size=16,
        ),
        "vision",
    ),
    TaskCase(
        "mobilevit",
        "semantic-segmentation",
        _cfg(
            "mobilevit",
            **_VISION,
            hidden_sizes=[16, 16, 16],
            neck_hidden_sizes=[8, 8, 8, 8, 8, 8, 16],
            num_attention_heads=2,
            aspp_out_channels=16,
        ),
        "vision",
    ),
    TaskCase(
        "dpt",
        "depth-estimation",
        _cfg(
            "dpt",
            **_VIT,
            out_indices=[0, 1],
            backbone_out_indices=[0, 1],
            neck_hidden_sizes=[8, 16],
            fusion_hidden_size=16,
            reassemble_factors=[2, 1],
            head_in_index=-1,
        ),
        "vision",
    ),
    TaskCase(
        "glpn",
        "depth-estimation",
        _cfg(
            "glpn",
            **_VISION,
            hidden_sizes=[8, 16, 16, 16],
            depths=[1, 1, 1, 1],
            num_attention_heads=[1, 1, 2, 2],
            decoder_hidden_size=16,
        ),
        "vision",
    ),
    TaskCase("detr", "object-detection", _detr("detr"), "vision"),
    TaskCase(
        "yolos",
        "object-detection",
        _cfg("yolos", **{**_VIT, "image_size": [32, 32], "num_labels": 4}, num_detection_tokens=4),
        "vision",
    ),
    # Audio
    TaskCase("wav2vec2", "automatic-speech-recognition", _cfg("wav2vec2", **_AUDIO), "audio"),
    TaskCase("wav2vec2", "audio-classification", _cfg("wav2vec2", **_AUDIO), "audio"),
    TaskCase("hubert", "automatic-speech-recognition", _cfg("hubert", **_AUDIO), "audio"),
    TaskCase(
        "wavlm",
        "audio-classification",
        _cfg("wavlm", **_AUDIO, num_buckets=8, max_bucket_distance=16),
        "audio",
    ),
    TaskCase(
        "data2vec-audio", "automatic-speech-recognition", _cfg("data2vec-audio", **_AUDIO), "audio"
    ),
    TaskCase("unispeech", "automatic-speech-recognition", _cfg("unispeech", **_AUDIO), "audio"),
    TaskCase(
        "sew", "automatic-speech-recognition", _cfg("sew", **_AUDIO, squeeze_factor=2), "audio"
    ),
    # Multimodal
    TaskCase(
        "clip",
        "zero-shot-image-classification",
        _cfg("clip", text_config=_CLIP_TEXT, vision_config=_VIT, projection_dim=16),
        "multimodal",
    ),
    TaskCase(
        "siglip",
        "zero-shot-image-classification",
        _cfg("siglip", text_config=_CLIP_TEXT, vision_config=_VIT),
        "multimodal",
    ),
    TaskCase("vision-encoder-decoder", "image-to-text", _ved, "multimodal"),
)

TASK_CASES = {f"{c.name}/{c.task}": c for c in _CASES}

#: One model per task and per family: what CI runs.
CI = (
    "bert/fill-mask",
    "bert/question-answering",
    "bert/multiple-choice",
    "bert/token-classification",
    "bert/sentence-similarity",
    "llama/text-classification",
    "vit/feature-extraction",
    "resnet/image-classification",
    "segformer/semantic-segmentation",
    "yolos/object-detection",
    "glpn/depth-estimation",
    "wav2vec2/automatic-speech-recognition",
    "wav2vec2/audio-classification",
    "clip/zero-shot-image-classification",
    "vision-encoder-decoder/image-to-text",
)
