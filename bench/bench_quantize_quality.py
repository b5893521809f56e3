"""int4 quality on a model that has learned something: top-1 agreement and perplexity ratio.

A tiny Llama is trained for ``--steps`` steps (batches of 8 x 128) on the repository's
own ``docs/*.md`` read as characters (the last 10% held out), exported with
``export_pretrained`` in fp32 and with ``quantize="int4"`` (each block size of ``--block-size``,
accuracy level 4, head quantized too unless ``--float-head``), and both exports are run
in ONNX Runtime on held-out windows: the share of positions where int4's most likely next
character is fp32's, and int4's perplexity over fp32's (1.0 is lossless).

    python bench/bench_quantize_quality.py [--steps 200] [--block-size 32 64 128] [--float-head]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np
import torch
import transformers as tf

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from onnx_export import hf  # noqa: E402

WINDOW = 128


def corpus() -> tuple[np.ndarray, np.ndarray, int]:
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    chars = sorted(set(text))
    codes = np.array([chars.index(c) for c in text], dtype=np.int64)
    split = int(len(codes) * 0.9)
    return codes[:split], codes[split:], len(chars)


def train(data: np.ndarray, vocab: int, steps: int) -> tf.LlamaForCausalLM:
    config = tf.LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=WINDOW * 2,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for step in range(steps):
        starts = rng.integers(0, len(data) - WINDOW - 1, 8)
        batch = torch.from_numpy(np.stack([data[s : s + WINDOW] for s in starts]))
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step}: loss {loss.item():.3f}", flush=True)
    return model.eval()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--block-size", type=int, nargs="+", default=[32])
    parser.add_argument("--float-head", action="store_true")
    args = parser.parse_args()
    train_data, held_out, vocab = corpus()
    print(f"docs/*.md: {len(train_data)} training characters, {vocab} distinct", flush=True)
    started = time.perf_counter()
    model = train(train_data, vocab, args.steps)
    print(f"  trained in {time.perf_counter() - started:.0f} s", flush=True)
    windows = np.stack([held_out[s : s + WINDOW + 1] for s in range(0, 8 * WINDOW, WINDOW)])
    ids, targets = windows[:, :-1], windows[:, 1:]
    with torch.no_grad():
        eager = model(torch.from_numpy(ids)).logits.numpy()

    def perplexity(logits: np.ndarray) -> float:
        picked = np.take_along_axis(log_softmax(logits), targets[..., None], -1)
        return float(np.exp(-picked.mean()))

    with tempfile.TemporaryDirectory() as scratch:
        folder = pathlib.Path(scratch)
        hf.export_pretrained(model, folder / "fp32")
        fp32 = hf.OrtModelForCausalLM.from_pretrained(folder / "fp32").logits(ids)
        size32 = (folder / "fp32" / "model.onnx").stat().st_size
        print(f"\nheld-out: {ids.size} positions; head ", end="")
        print("float" if args.float_head else "int4")
        print(f"fp32 export vs eager: max |logit diff| {np.abs(fp32 - eager).max():.2e}")
        ppl32 = perplexity(fp32)
        for block in args.block_size:  # one trained model, each block size
            name = f"int4-{block}"
            hf.export_pretrained(
                model,
                folder / name,
                quantize="int4",
                quantize_block_size=block,
                quantize_head=not args.float_head,
            )
            int4 = hf.OrtModelForCausalLM.from_pretrained(folder / name).logits(ids)
            size4 = (folder / name / "model.onnx").stat().st_size
            agreement = float(np.mean(int4.argmax(-1) == fp32.argmax(-1)))
            ppl4 = perplexity(int4)
            print(
                f"block size {block}: top-1 agreement int4 vs fp32 {agreement:.3f}; perplexity "
                f"fp32 {ppl32:.3f}, int4 {ppl4:.3f}, ratio {ppl4 / ppl32:.4f}; model.onnx "
                f"fp32 {size32 / 1e6:.2f} MB, int4 {size4 / 1e6:.2f} MB"
            )


if __name__ == "__main__":
    main()
