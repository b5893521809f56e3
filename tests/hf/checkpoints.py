"""Tiny ``transformers`` checkpoints for the Hugging Face tests: small configs, random weights.

Weights are drawn with a larger init scale than transformers' default so that greedy
decoding produces varied tokens (with the default scale a random model repeats one
token, which would make the comparison with ``generate()`` weak).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import torch
import transformers as tf

VOCAB = 96
_DECODER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "bos_token_id": 1,
    "eos_token_id": None,
    "pad_token_id": 0,
    "initializer_range": 0.2,
}
_ENCODER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "num_labels": 3,
}
_SEQ2SEQ = {
    "vocab_size": VOCAB,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "init_std": 0.2,
}
_VISION = {"image_size": 32, "num_channels": 3, "num_labels": 5}


@dataclasses.dataclass(frozen=True)
class Case:
    """One architecture and task: how to build its tiny model."""

    name: str
    task: str
    build: Callable[[], Any]

    def save(self, folder: pathlib.Path, seed: int = 0) -> Any:
        """Build the model with ``seed`` and ``save_pretrained`` it into ``folder``."""
        torch.manual_seed(seed)
        model = self.build().eval()
        model.save_pretrained(folder)
        return model


def _gpt2() -> Any:
    config = tf.GPT2Config(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=1,
        eos_token_id=None,
        pad_token_id=0,
        initializer_range=0.2,
    )
    return tf.GPT2LMHeadModel(config)


def _t5() -> Any:
    config = tf.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=95,
        initializer_factor=8.0,
    )
    return tf.T5ForConditionalGeneration(config)


def _bart() -> Any:
    config = tf.BartConfig(
        **_SEQ2SEQ,
        max_position_embeddings=64,
        bos_token_id=0,
        pad_token_id=1,
        decoder_start_token_id=2,
        eos_token_id=95,
        forced_eos_token_id=95,
    )
    return tf.BartForConditionalGeneration(config)


def _whisper() -> Any:
    config = tf.WhisperConfig(
        **_SEQ2SEQ,
        num_mel_bins=16,
        max_source_positions=16,
        max_target_positions=64,
        decoder_start_token_id=1,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=95,
        suppress_tokens=[3, 4],
        begin_suppress_tokens=[5],
    )
    return tf.WhisperForConditionalGeneration(config)


def _decoder(config_class: Any, **extra: Any) -> Callable[[], Any]:
    return lambda: tf.AutoModelForCausalLM.from_config(config_class(**_DECODER, **extra))


def _auto(model_type: str, **extra: Any) -> Callable[[], Any]:
    """A decoder of ``model_type`` from the shared small settings, ``extra`` on top."""
    return lambda: tf.AutoModelForCausalLM.from_config(
        tf.AutoConfig.for_model(model_type, **{**_DECODER, **extra})
    )


_MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}

#: Decoders beyond the first six, built the same way (issue 21's list).
_MORE_DECODERS = (
    Case("qwen3", "text-generation", _auto("qwen3", head_dim=8)),
    Case("gemma2", "text-generation", _auto("gemma2", head_dim=8, sliding_window=4)),
    Case("gemma3_text", "text-generation", _auto("gemma3_text", head_dim=8, sliding_window=4)),
    Case("phi", "text-generation", _auto("phi", partial_rotary_factor=0.5)),
    Case("gpt_neox", "text-generation", _auto("gpt_neox", rotary_pct=0.5)),
    Case(
        "gptj",
        "text-generation",
        _auto("gptj", n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64),
    ),
    Case(
        "falcon", "text-generation", _auto("falcon", num_kv_heads=2, new_decoder_architecture=True)
    ),
    Case("opt", "text-generation", _auto("opt", ffn_dim=64, word_embed_proj_dim=32)),
    Case("bloom", "text-generation", _auto("bloom", n_layer=2, n_head=4)),
    Case("stablelm", "text-generation", _auto("stablelm")),
    Case("olmo", "text-generation", _auto("olmo")),
    Case("olmo2", "text-generation", _auto("olmo2")),
    Case("cohere", "text-generation", _auto("cohere")),
    Case("granite", "text-generation", _auto("granite")),
    Case("starcoder2", "text-generation", _auto("starcoder2")),
    Case("mixtral", "text-generation", _auto("mixtral", **_MOE)),
    Case(
        "qwen2_moe",
        "text-generation",
        _auto(
            "qwen2_moe",
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        ),
    ),
    Case(
        "gpt_bigcode",
        "text-generation",
        _auto("gpt_bigcode", n_embd=32, n_layer=2, n_head=4, n_positions=64),
    ),
    Case(
        "codegen",
        "text-generation",
        _auto("codegen", n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64, n_ctx=64),
    ),
)


def _vision(config: Any) -> Callable[[], Any]:
    return lambda: tf.AutoModelForImageClassification.from_config(config)


CASES = {
    case.name: case
    for case in (
        Case("llama", "text-generation", _decoder(tf.LlamaConfig)),
        Case("gpt2", "text-generation", _gpt2),
        Case("qwen2", "text-generation", _decoder(tf.Qwen2Config)),
        Case("mistral", "text-generation", _decoder(tf.MistralConfig)),
        Case("gemma", "text-generation", _decoder(tf.GemmaConfig, head_dim=8)),
        Case("phi3", "text-generation", _decoder(tf.Phi3Config)),
        Case("t5", "text2text-generation", _t5),
        Case("bart", "text2text-generation", _bart),
        Case("whisper", "automatic-speech-recognition", _whisper),
        Case("bert", "feature-extraction", lambda: tf.BertModel(tf.BertConfig(**_ENCODER))),
        Case(
            "roberta",
            "text-classification",
            lambda: tf.RobertaForSequenceClassification(
                tf.RobertaConfig(**{**_ENCODER, "max_position_embeddings": 70, "pad_token_id": 1})
            ),
        ),
        Case(
            "distilbert",
            "text-classification",
            lambda: tf.DistilBertForSequenceClassification(
                tf.DistilBertConfig(
                    vocab_size=VOCAB,
                    dim=32,
                    hidden_dim=64,
                    n_layers=2,
                    n_heads=4,
                    max_position_embeddings=64,
                    num_labels=3,
                )
            ),
        ),
        Case(
            "vit",
            "image-classification",
            _vision(
                tf.ViTConfig(
                    **_VISION,
                    patch_size=8,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                )
            ),
        ),
        Case(
            "convnext",
            "image-classification",
            _vision(
                tf.ConvNextConfig(**_VISION, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
            ),
        ),
        Case(
            "swin",
            "image-classification",
            _vision(
                tf.SwinConfig(
                    **_VISION,
                    patch_size=4,
                    embed_dim=16,
                    depths=[1, 1],
                    num_heads=[2, 2],
                    window_size=4,
                )
            ),
        ),
        *_MORE_DECODERS,
    )
}
