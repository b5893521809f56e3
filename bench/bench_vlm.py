"""A vision-language model (LLaVA) generating: ours against transformers eager.

One random-weight LLaVA (a CLIP vision tower of hidden 64 on 84x84 images, 36 image
tokens; a Llama decoder of hidden 128, 4 layers), one image and a chat prompt, greedy,
1 thread each (torch and ONNX Runtime), batch 1; rounds alternate between the tools,
best of ``--repeat``:

- **first token**: ``generate(max_new_tokens=1)`` from ``pixel_values`` and ``input_ids``
  (the vision encoder, the embedding, the merge and the prompt's decoder step);
- **decode step**: the time of ``max_new_tokens=1 + N`` less the first token's, per token.

The tokens are checked to be the same. onnxruntime-genai 0.18 is not run: its model
builder makes no vision encoder (LLaVA is not in it; for Gemma 3, Mistral 3 and Qwen-VL it
writes the text decoder only, the vision graph coming from each model's own export
scripts, which need the real checkpoints).

    python bench/bench_vlm.py [--repeat 5] [--new 32]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import pathlib
import sys
import tempfile
import time
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import transformers as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from onnx_export import hf
from tests.hf.vlm_checkpoints import TEMPLATE, tokenizer


def checkpoint(folder: pathlib.Path) -> tuple[Any, Any]:
    """The random LLaVA and its processor, saved into ``folder``."""
    text = {
        "model_type": "llama",
        "vocab_size": 96,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "bos_token_id": 1,
        "eos_token_id": None,
        "pad_token_id": 0,
        "initializer_range": 0.2,
    }
    vision = {
        "model_type": "clip_vision_model",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "image_size": 84,
        "patch_size": 14,
    }
    config = tf.LlavaConfig(
        text_config=text, vision_config=vision, image_token_index=4, image_seq_length=36
    )
    torch.manual_seed(0)
    model = tf.LlavaForConditionalGeneration(config).eval()
    images = tf.CLIPImageProcessorPil(
        size={"shortest_edge": 84}, crop_size={"height": 84, "width": 84}
    )
    processor = tf.LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer("<image>"),
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=TEMPLATE.replace("{image}", "<image>"),
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor


def _timed(run: Any) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    tokens = run()
    return time.perf_counter() - start, np.asarray(tokens)


def main() -> None:
    """Print first-token latency and decode step, ours and transformers', and their ratio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--new", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-vlm-"))
    model, processor = checkpoint(root / "checkpoint")
    hf.export_pretrained(root / "checkpoint", root / "onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    ours = hf.OrtModelForImageTextToText.from_pretrained(root / "onnx", session_options=options)
    image = (np.random.default_rng(0).random((96, 120, 3)) * 255).astype(np.uint8)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "kalo"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(images=image, text=prompt, return_tensors="pt", add_special_tokens=False)
    ids, pixels = inputs["input_ids"].numpy(), inputs["pixel_values"].numpy()

    def run_ours(new: int) -> np.ndarray:
        return ours.generate(ids, pixel_values=pixels, max_new_tokens=new)

    def run_theirs(new: int) -> np.ndarray:
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        return np.asarray(out.numpy())

    tools = {"ours": run_ours, "eager": run_theirs}
    first = {name: float("inf") for name in tools}
    whole = {name: float("inf") for name in tools}
    tokens: dict[str, np.ndarray] = {}
    for run in tools.values():  # warm-up
        run(2)
    for _ in range(args.repeat):
        for name, run in tools.items():
            seconds, _ = _timed(lambda run=run: run(1))
            first[name] = min(first[name], seconds)
            seconds, tokens[name] = _timed(lambda run=run: run(1 + args.new))
            whole[name] = min(whole[name], seconds)
    same = np.array_equal(tokens["ours"], tokens["eager"])
    print(
        f"LLaVA (vision hidden 64, 36 image tokens; text hidden 128, 4 layers), prompt "
        f"{ids.shape[1]} tokens, {args.new} new, 1 thread, best of {args.repeat}"
    )
    print(f"{'tool':<6} {'first token ms':>14} {'decode ms/token':>15}")
    step = {n: (whole[n] - first[n]) / args.new for n in tools}
    for name in tools:
        print(f"{name:<6} {first[name] * 1e3:>14.2f} {step[name] * 1e3:>15.3f}")
    print(
        f"eager/ours: first token {first['eager'] / first['ours']:.2f}x, decode step "
        f"{step['eager'] / step['ours']:.2f}x; same tokens: {same}"
    )


if __name__ == "__main__":
    main()
