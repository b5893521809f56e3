"""Vision-language models (LLaVA, Qwen2-VL) generating: ours against transformers eager.

One random-weight LLaVA (a CLIP vision tower of hidden 64 on 84x84 images, 36 image
tokens; a Llama decoder of hidden 128, 4 layers) and one random-weight Qwen2-VL of the
same sizes (a vision tower of hidden 64, 4 blocks, 14-pixel patches merged 2x2 on a
168x168 image: 144 patches, 36 image tokens; a Qwen2 decoder of hidden 128, 4 layers,
M-RoPE), one image and a chat prompt, greedy, 1 thread each (torch and ONNX Runtime),
batch 1; rounds alternate between the tools, best of ``--repeat``:

- **first token**: ``generate(max_new_tokens=1)`` from ``pixel_values`` and ``input_ids``
  (the vision encoder, the embedding, the merge and the prompt's decoder step);
- **decode step**: the time of ``max_new_tokens=1 + N`` less the first token's, per token.

The tokens are checked to be the same. onnxruntime-genai 0.18 is not run: its model
builder makes no vision encoder (LLaVA is not in it; for Gemma 3, Mistral 3 and Qwen-VL it
writes the text decoder only, the vision graph coming from each model's own export
scripts, which need the real checkpoints).

    python bench/bench_vlm.py [--repeat 5] [--new 32] [--family llava qwen2_vl]
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
from tests.hf.vlm_checkpoints import TEMPLATE, images_only, tokenizer

_TEXT = {
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


def llava(folder: pathlib.Path) -> tuple[Any, Any, np.ndarray]:
    """The random LLaVA, its processor (saved into ``folder``) and the image."""
    text = {"model_type": "llama", **_TEXT}
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
    return model, processor, _image(96, 120)


def qwen2_vl(folder: pathlib.Path) -> tuple[Any, Any, np.ndarray]:
    """The random Qwen2-VL, its processor (saved into ``folder``) and the image."""
    text = {**_TEXT, "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6]}}
    vision = {
        "depth": 4, "embed_dim": 64, "hidden_size": 128, "num_heads": 4, "mlp_ratio": 2,
        "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2,
    }  # fmt: skip
    config = tf.Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=4, vision_start_token_id=5,
        vision_end_token_id=6, video_token_id=7,
    )  # fmt: skip
    torch.manual_seed(0)
    model = tf.Qwen2VLForConditionalGeneration(config).eval()
    images = tf.Qwen2VLImageProcessorPil(size={"shortest_edge": 56 * 56, "longest_edge": 168**2})
    processor = images_only(tf.Qwen2VLProcessor)(
        image_processor=images,
        tokenizer=tokenizer("<|image_pad|>", ("<|vision_start|>", "<|vision_end|>", "<|v|>")),
        chat_template=TEMPLATE.replace("{image}", "<|vision_start|><|image_pad|><|vision_end|>"),
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor, _image(168, 168)


def _image(height: int, width: int) -> np.ndarray:
    return (np.random.default_rng(0).random((height, width, 3)) * 255).astype(np.uint8)


FAMILIES = {"llava": (llava, "LLaVA"), "qwen2_vl": (qwen2_vl, "Qwen2-VL")}


def _timed(run: Any) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    tokens = run()
    return time.perf_counter() - start, np.asarray(tokens)


def bench(family: str, root: pathlib.Path, repeat: int, new: int) -> dict[str, Any]:
    """One family's first token and decode step, ours and transformers', same rounds."""
    model, processor, image = FAMILIES[family][0](root / "checkpoint")
    hf.export_pretrained(root / "checkpoint", root / "onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    ours = hf.OrtModelForImageTextToText.from_pretrained(root / "onnx", session_options=options)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "kalo"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(images=image, text=prompt, return_tensors="pt", add_special_tokens=False)
    ids = inputs["input_ids"].numpy()
    images = {k: inputs[k].numpy() for k in ("pixel_values", "image_grid_thw") if k in inputs}

    def run_ours(count: int) -> np.ndarray:
        return ours.generate(ids, **images, max_new_tokens=count)

    def run_theirs(count: int) -> np.ndarray:
        with torch.no_grad():
            out = model.generate(
                **inputs, max_new_tokens=count, min_new_tokens=count, do_sample=False
            )
        return np.asarray(out.numpy())

    tools = {"ours": run_ours, "eager": run_theirs}
    first = {name: float("inf") for name in tools}
    whole = {name: float("inf") for name in tools}
    tokens: dict[str, np.ndarray] = {}
    for run in tools.values():  # warm-up
        run(2)
    for _ in range(repeat):
        for name, run in tools.items():
            seconds, _ = _timed(lambda run=run: run(1))
            first[name] = min(first[name], seconds)
            seconds, tokens[name] = _timed(lambda run=run: run(1 + new))
            whole[name] = min(whole[name], seconds)
    step = {n: (whole[n] - first[n]) / new for n in tools}
    same = np.array_equal(tokens["ours"], tokens["eager"])
    return {"prompt": ids.shape[1], "first": first, "step": step, "same": same}


def main() -> None:
    """Print first-token latency and decode step, ours and transformers', and their ratio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--family", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"vision hidden 64, 36 image tokens; text hidden 128, 4 layers; {args.new} new "
        f"tokens, 1 thread, best of {args.repeat}"
    )
    print(f"{'model':<9} {'tool':<6} {'prompt':>6} {'first token ms':>14} {'decode ms/token':>15}")
    for family in args.family:
        root = pathlib.Path(tempfile.mkdtemp(prefix=f"bench-vlm-{family}-"))
        result = bench(family, root, args.repeat, args.new)
        first, step = result["first"], result["step"]
        for name in ("ours", "eager"):
            print(
                f"{FAMILIES[family][1]:<9} {name:<6} {result['prompt']:>6} "
                f"{first[name] * 1e3:>14.2f} {step[name] * 1e3:>15.3f}"
            )
        print(
            f"{FAMILIES[family][1]:<9} eager/ours: first token "
            f"{first['eager'] / first['ours']:.2f}x, decode step "
            f"{step['eager'] / step['ours']:.2f}x; same tokens: {result['same']}"
        )


if __name__ == "__main__":
    main()
