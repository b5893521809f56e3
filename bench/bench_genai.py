"""Decode speed side by side with onnxruntime-genai (skipped when it is not installed).

On random-weight Llama checkpoints (``bench_generate.CONFIGS``, plus ``smollm-135M``:
SmolLM-135M's shape, 30 layers, hidden 576, tied embeddings), batch 1, a 32-token prompt,
64 new tokens, greedy, 1 thread (``--threads 1,2`` for several): ours (default target,
``--target onnxruntime``, ``--target onnxruntime --quantize int4``) through
``OrtModelForCausalLM.generate``, genai fp32 and int4 (its model builder, ``python -m
onnxruntime_genai.models.builder``, in a subprocess) through ``og.Generator``, and eager
transformers. Runs alternate between the tools (``--repeat`` rounds, best of each);
tokens/s and the ratio to ours (default target) are printed, with each graph's node
count and its com.microsoft ops. Absolute numbers on a shared machine are noise; the
process's CPU seconds (best round) are printed too, less moved by other processes (with
one thread; with more, idle threads' spinning counts).

A whole request (prompt + 64 tokens) is not the only measure: each tool is also timed
for one new token, which is its fixed cost per request (setting up, the prompt, the first
token), and the rest divided by the 63 later tokens is its decode step. A tool with a
large fixed cost can win the request and lose the steps, or the reverse (genai 0.18's
``og.Generator`` costs 12 ms to create on a machine whose ``rdseed`` is slow, as on this
workplace's AMD EPYC VMs: libstdc++'s ``std::random_device``).

    python bench/bench_genai.py [--sizes llama-5M,llama-135M,smollm-135M] [--threads 1,2]
        [--repeat 3]
        [--genai-path DIR]   # a folder to put on PYTHONPATH for onnxruntime_genai
"""

from __future__ import annotations

import os

# torch's OpenMP threads spin after each eager op (libgomp's default wait policy): with two
# threads on two cores they keep a core from the tool timed next, which then runs up to
# 2x slower (seen here at --threads 2). libgomp reads this when it loads, before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import collections
import json
import logging
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.bench_generate import CONFIGS, NEW, PROMPT
from onnx_export import hf

#: bench_generate's sizes, plus SmolLM-135M's shape (9 heads, 3 KV heads, head size 64).
SIZES = {
    **CONFIGS,
    "smollm-135M": {
        "vocab_size": 49152,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "tie_word_embeddings": True,
    },
}


def checkpoint(name: str, folder: pathlib.Path) -> Any:
    """A random-weight Llama with a word-level tokenizer (genai's builder wants one)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    settings = {**SIZES[name], "max_position_embeddings": 512, "bos_token_id": 1}
    config = tf.LlamaConfig(**settings, eos_token_id=2)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    # One token per id (the special tokens are not also "t0".."t2"), or the tokenizer may
    # give "</s>" a new id past the vocabulary and genai's builder adds it to its EOS list.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, config.vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(folder)
    return model


def graph_summary(path: pathlib.Path) -> str:
    graph = onnx.load(path, load_external_data=False).graph
    fused = collections.Counter(n.op_type for n in graph.node if n.domain == "com.microsoft")
    ops = ", ".join(f"{op} x{count}" for op, count in sorted(fused.items()))
    return f"{len(graph.node)} nodes; {ops or 'no com.microsoft op'}"


def build_genai(ckpt: pathlib.Path, out: pathlib.Path, precision: str, env: dict[str, str]) -> None:
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt)]
    command += ["-o", str(out), "-p", precision, "-e", "cpu", "-c", str(out.parent / "cache")]
    subprocess.run(command, check=True, env=env, capture_output=True)


def set_genai_threads(folder: pathlib.Path, threads: int) -> None:
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options["intra_op_num_threads"] = threads
    options["inter_op_num_threads"] = 1
    path.write_text(json.dumps(config, indent=4))


#: Runs a tool on a prompt for a number of new tokens; returns the new tokens.
Runner = Callable[[np.ndarray, int], np.ndarray]


def ours_runner(folder: pathlib.Path, threads: int) -> Runner:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    model = hf.OrtModelForCausalLM.from_pretrained(folder, session_options=options)
    return lambda ids, new: model.generate(ids, max_new_tokens=new, eos_token_id=[])[0, PROMPT:]


def genai_runner(folder: pathlib.Path) -> Runner:
    import onnxruntime_genai as og

    model = og.Model(str(folder))

    def run(ids: np.ndarray, new: int) -> np.ndarray:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=PROMPT + new, min_length=PROMPT + new, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        while not generator.is_done():
            generator.generate_next_token()
        return np.asarray(generator.get_sequence(0))[PROMPT:]

    return run


def eager_runner(model: Any, threads: int) -> Runner:
    def run(ids: np.ndarray, new: int) -> np.ndarray:
        torch.set_num_threads(threads)
        with torch.no_grad():
            out = model.generate(
                torch.from_numpy(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
        return out[0, PROMPT:].numpy()

    return run


def bench_size(
    name: str, root: pathlib.Path, args: argparse.Namespace, env: dict[str, str]
) -> None:
    ckpt = root / "ckpt"
    model = checkpoint(name, ckpt)
    folders: dict[str, pathlib.Path] = {}
    for label, kwargs in (
        ("ours (default target)", {}),
        ("ours --target onnxruntime", {"target": "onnxruntime"}),
        ("ours onnxruntime + int4", {"target": "onnxruntime", "quantize": "int4"}),
    ):
        started = time.perf_counter()
        folders[label] = root / label.replace(" ", "_")
        hf.export_pretrained(ckpt, folders[label], **kwargs)  # type: ignore[arg-type]
        print(f"  exported {label} in {time.perf_counter() - started:.0f} s", flush=True)
        # onnxruntime's MatMulNBits quantizer calls logging.basicConfig(level=INFO) on import
        logging.getLogger().setLevel(logging.WARNING)
    if env:
        for precision in ("fp32", "int4"):
            out = root / f"genai_{precision}"
            build_genai(ckpt, out, precision, env)
            folders[f"genai {precision}"] = out
    for threads in (int(t) for t in str(args.threads).split(",")):
        bench_threads(name, model, folders, threads, args.repeat)


def bench_threads(
    name: str, model: Any, folders: dict[str, pathlib.Path], threads: int, repeat: int
) -> None:
    runners: dict[str, Runner] = {}
    for label, folder in folders.items():
        if label.startswith("genai"):
            set_genai_threads(folder, threads)
            runners[label] = genai_runner(folder)
        else:
            runners[label] = ours_runner(folder, threads)
    runners["eager transformers"] = eager_runner(model, threads)
    ids = np.random.default_rng(0).integers(3, model.config.vocab_size, (1, PROMPT))
    best: dict[tuple[str, int], float] = {}
    cpu: dict[tuple[str, int], float] = {}
    tokens: dict[str, np.ndarray] = {}
    for _ in range(repeat):  # alternate the tools, best round of each
        for label, run in runners.items():
            for new in (1, NEW):
                started, started_cpu = time.perf_counter(), time.process_time()
                out = run(ids, new)
                key = (label, new)
                cpu[key] = min(cpu.get(key, 1e9), time.process_time() - started_cpu)
                best[key] = min(best.get(key, 1e9), time.perf_counter() - started)
            tokens[label] = out
    print(f"\n{name}, {threads} thread(s), {PROMPT}-token prompt + {NEW} new tokens")
    print_request_table(runners, folders, best, cpu, tokens)
    print_step_table(runners, cpu)
    sys.stdout.flush()


def _rival(label: str) -> str:
    return "genai int4" if "int4" in label else "genai fp32"


def print_request_table(
    runners: dict[str, Runner],
    folders: dict[str, pathlib.Path],
    best: dict[tuple[str, int], float],
    cpu: dict[tuple[str, int], float],
    tokens: dict[str, np.ndarray],
) -> None:
    """Whole requests: tokens/s of prompt + NEW tokens, wall and CPU."""
    speeds = {label: NEW / best[label, NEW] for label in runners}
    print(
        "| | tokens/s | vs ours default | vs genai (same precision) | tokens per CPU s "
        "(vs genai) | same tokens as eager | graph |"
    )
    print("|---|---|---|---|---|---|---|")
    for label in runners:
        speed, rival = speeds[label], _rival(label)
        versus = cpu_versus = ""
        if rival in speeds and "ours" in label:
            versus = f"{speed / speeds[rival]:.2f}x"
            cpu_versus = f" ({cpu[rival, NEW] / cpu[label, NEW]:.2f}x)"
        same = bool(np.array_equal(tokens[label], tokens["eager transformers"]))
        path = folders.get(label)
        graph = graph_summary(path / "model.onnx") if path is not None else ""
        print(
            f"| {label} | {speed:.0f} | {speed / speeds['ours (default target)']:.2f}x "
            f"| {versus} | {NEW / cpu[label, NEW]:.0f}{cpu_versus} | {same} | {graph} |"
        )


def print_step_table(runners: dict[str, Runner], cpu: dict[tuple[str, int], float]) -> None:
    """The fixed cost of a request (1 new token) and the decode step after it, CPU time."""
    steps = {label: (cpu[label, NEW] - cpu[label, 1]) / (NEW - 1) for label in runners}
    print(
        "\n| | first token (set-up + prompt), CPU ms | decode step, CPU ms | decode tokens per "
        "CPU s | vs genai (same precision) |"
    )
    print("|---|---|---|---|---|")
    for label in runners:
        rival = _rival(label)
        versus = f"{steps[rival] / steps[label]:.2f}x" if rival in steps and "ours" in label else ""
        print(
            f"| {label} | {cpu[label, 1] * 1e3:.2f} | {steps[label] * 1e3:.3f} "
            f"| {1 / steps[label]:.0f} | {versus} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="llama-5M")
    parser.add_argument("--threads", default="1", help="comma-separated: 1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--genai-path", default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    if args.genai_path:
        env["PYTHONPATH"] = os.pathsep.join([args.genai_path, env.get("PYTHONPATH", "")])
        sys.path.insert(0, args.genai_path)
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        print("onnxruntime-genai is not installed: genai's columns are skipped.")
        env = {}
    for name in args.sizes.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            bench_size(name, pathlib.Path(scratch), args, env)


if __name__ == "__main__":
    main()
