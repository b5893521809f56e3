"""A prompt step of ``generate()`` with the vocabulary head on the last position only.

The default decoder's ``num_logits_to_keep`` (``hf/export/_logits.py``) lets a prompt step
run the head (hidden x vocab) on the last position alone; ``generate()`` feeds 1 there.
This bench exports a random 4-layer Llama with a 32k vocabulary, runs a 128-token prompt
plus one new token both ways in one process (best of 7 each) and checks the tokens agree.
Run it from the repository root: ``python bench/bench_prefill_head.py``.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import numpy as np
import torch
import transformers as tf

from onnx_export import hf
from onnx_export.hf.runtime.generation import _causal

PROMPT, ROUNDS = 128, 7
CONFIG = {
    "vocab_size": 32000,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "eos_token_id": None,
}


def _best(model: hf.OrtModelForCausalLM, ids: np.ndarray) -> tuple[float, np.ndarray]:
    best, out = float("inf"), np.empty(0)
    for _ in range(ROUNDS):
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=1)
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, folder = pathlib.Path(tmp, "ckpt"), pathlib.Path(tmp, "out")
        torch.manual_seed(0)
        tf.LlamaForCausalLM(tf.LlamaConfig(**CONFIG)).eval().save_pretrained(checkpoint)
        hf.export_pretrained(str(checkpoint), str(folder))
        model = hf.OrtModelForCausalLM.from_pretrained(str(folder))
        ids = np.random.default_rng(0).integers(3, CONFIG["vocab_size"], (1, PROMPT))
        last, tokens_last = _best(model, ids)
        keeps = _causal.keeps_logits
        _causal.keeps_logits = lambda session: False  # every position, as before
        try:
            every, tokens_every = _best(model, ids)
        finally:
            _causal.keeps_logits = keeps
    print("| prompt step (128 tokens + 1 new) | ms | ratio |")
    print("|---|---|---|")
    print(f"| head on every position | {every * 1e3:.1f} | 1.00 |")
    print(f"| head on the last position | {last * 1e3:.1f} | {last / every:.2f} |")
    print(f"tokens equal: {np.array_equal(tokens_last, tokens_every)}")


if __name__ == "__main__":
    main()
