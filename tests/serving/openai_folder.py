"""A tiny Llama folder to serve OpenAI's way: random weights, a byte-level BPE tokenizer
trained here (on JSON and chat text, 320 tokens), a chat template, exported with
``onnx_export.hf.export_pretrained`` (the default ``target="onnx"`` decoder, or the fused
``target="onnxruntime"`` one, int4 too)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

VOCAB = 320
EOS = 2
#: A template that shows the tools it is given, so a test can see they reached it.
TEMPLATE = (
    "{{ bos_token }}{% if tools %}tools: {% for t in tools %}{{ t['function']['name'] }} "
    "{% endfor %}\n{% endif %}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def train_tokenizer(folder: pathlib.Path, template: str = TEMPLATE) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` (with the chat template) in ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    samples = [
        json.dumps({"name": "ada", "admin": True, "role": "owner", "age": 42}),
        json.dumps([1, 22, 333, 22]),
        "user: hello there, how are you?\nassistant: fine thanks. tools: weather",
        "Once upon a time there was a little model that said hello world.",
    ] * 20
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(samples, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "chat_template": template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def build(
    root: pathlib.Path,
    export: dict[str, Any] | None = None,
    template: str = TEMPLATE,
    **sizes: Any,
) -> pathlib.Path:
    """Save the tiny checkpoint under ``root`` and export it; returns the exported folder.

    ``export``: ``export_pretrained``'s options (``target="onnxruntime"``, ``quantize``);
    ``template``: the tokenizer's chat template.
    """
    import torch
    import transformers as tf

    from onnx_export import hf

    settings = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        **sizes,
    }
    config = tf.LlamaConfig(
        **settings, bos_token_id=1, eos_token_id=EOS, pad_token_id=0, initializer_range=0.2
    )
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    model.save_pretrained(root / "checkpoint")
    train_tokenizer(root / "checkpoint", template)
    hf.export_pretrained(root / "checkpoint", root / "tiny-llama", **(export or {}))
    return root / "tiny-llama"
