"""OpenAI-compatible serving: ``onnx-export serve --openai`` against ``transformers serve``.

One random-weight Llama of ~135M parameters (``bench_generate.CONFIGS["llama-135M"]``: 12
layers, hidden 768, vocabulary 32,000) with a word-level tokenizer (``t3 t4 ...``, one token
per word) and a one-line chat template, saved once; ours serves it exported by
``onnx_export.hf.export_pretrained`` (fp32; int4 weights: ``quantize="int4"``; dynamic int8:
``quantize="int8"``), and exported with ``target="onnxruntime"`` (the fused
GroupQueryAttention decoder whose rows live in slots of one shared cache:
``--precisions fused-fp32 fused-int4 fused-int8``); theirs is
``transformers serve CHECKPOINT`` (FastAPI, eager PyTorch) in its default mode and with
``--continuous-batching`` (``--theirs default cb``, both servers up at once). At 1, 8 and
32 concurrent clients, each a thread with the official ``openai`` client streaming
``/v1/chat/completions`` requests (greedy, ``max_tokens`` new
tokens, a ~32-token prompt of its own), it measures

- requests/s and tokens/s over the level's wall time,
- time to first token (TTFT, p50) and the inter-token latency (ITL, p50 and p99, the gaps
  between streamed chunks),

and checks that every answer's text is the same from both servers (same prompts, greedy).
With ``--genai``, onnxruntime-genai 0.18 runs the same prompts in-process on its own fp32
build of the checkpoint (its model builder): one after another (``og.Generator`` per
request; a request's TTFT counts from the level's start, as if all arrived at once), and
all at once as one batch of its generator (the prompts are of equal length); no HTTP.
All servers are started first (an idle one takes no CPU); each level then runs on each
server in turn, ``--rounds`` times; the table has each metric's median over the rounds
(tokens/s with its range), and ours over theirs in tokens/s is taken round by round (the
two ran one after the other) and given as its median and range. Same threads for all.
Absolute numbers on a shared 2-core machine are noise; compare the columns of one run.
Prints a Markdown table.

    python bench/bench_openai_serve.py [--concurrency 1 8 32] [--new 16] [--requests 1]
        [--precisions fp32 int4 int8 fused-fp32 fused-int4 fused-int8] [--threads 2]
        [--theirs default cb] [--rounds 3]
        [--skip-transformers]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}"
PROMPT_WORDS = 32


def build_checkpoint(folder: pathlib.Path) -> None:
    """The ~135M Llama (random weights) and its word-level tokenizer with a chat template."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers

    from bench.bench_generate import CONFIGS

    config = tf.LlamaConfig(
        **CONFIGS["llama-135M"], max_position_embeddings=512, bos_token_id=1, eos_token_id=2
    )
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).eval().save_pretrained(folder)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, config.vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = TEMPLATE
    fast.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(TEMPLATE)


def export(checkpoint: pathlib.Path, out: pathlib.Path, precision: str) -> None:
    """``precision``: ``fp32`` or ``int4``, ``fused-`` first for ``target="onnxruntime"``."""
    from onnx_export import hf

    fused = precision.startswith("fused-")
    weights = precision.removeprefix("fused-")
    quantize = None if weights == "fp32" else weights
    hf.export_pretrained(
        checkpoint, out, quantize=quantize, target="onnxruntime" if fused else "onnx"
    )


def _label(precision: str) -> str:
    return "ours " + precision.replace("fused-", "fused ")


@dataclasses.dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    model: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    from onnx_export.serving import free_port

    return free_port()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the server did not answer /health: {log.read_text()[-2000:]}")


def start_ours(folder: pathlib.Path, threads: int, log: pathlib.Path) -> Server:
    port = _free_port()
    command = [sys.executable, "-m", "onnx_export.cli", "serve", str(folder), "--openai"]
    command += ["--port", str(port), "--threads", str(threads), "--name", "llm"]
    command += ["--max-batch-size", "32", "--max-waiting", "256"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=environment
    )
    _wait_ready(f"http://127.0.0.1:{port}", process, log)
    return Server(process, f"http://127.0.0.1:{port}/v1", "llm")


def start_transformers(
    checkpoint: pathlib.Path, threads: int, cb: bool, log: pathlib.Path
) -> Server:
    port = _free_port()
    executable = shutil.which("transformers", path=str(pathlib.Path(sys.executable).parent))
    command = [executable or "transformers", "serve", str(checkpoint), "--port", str(port)]
    command += ["--host", "127.0.0.1", "--device", "cpu", "--dtype", "float32"]
    command += [
        "--continuous-batching" if cb else "--no-continuous-batching",
        "--log-level",
        "warning",
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    process = subprocess.Popen(
        command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=environment
    )
    _wait_ready(f"http://127.0.0.1:{port}", process, log)
    return Server(process, f"http://127.0.0.1:{port}/v1", str(checkpoint))


@dataclasses.dataclass
class Answer:
    text: str
    start: float
    chunks: list[float]


def ask(client: Any, model: str, prompt: str, new: int) -> Answer:
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=new,
        temperature=0,
        stream=True,
    )
    texts, times = [], []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            texts.append(chunk.choices[0].delta.content)
            times.append(time.perf_counter())
    return Answer("".join(texts), start, times)


def run_level(
    server: Server, prompts: list[str], concurrency: int, new: int
) -> tuple[dict[str, float], list[str]]:
    import openai

    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=600)
    ask(client, server.model, prompts[0], 2)  # warm
    shares = [prompts[i::concurrency] for i in range(concurrency)]

    def worker(share: list[str]) -> list[Answer]:
        return [ask(client, server.model, p, new) for p in share]

    begin = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(worker, shares))
    wall = time.perf_counter() - begin
    answers: list[Answer | None] = [None] * len(prompts)
    for i, share in enumerate(done):
        for j, answer in enumerate(share):
            answers[i + j * concurrency] = answer
    final = [a for a in answers if a is not None]
    tokens = sum(len(a.text.split()) for a in final)
    ttft = [a.chunks[0] - a.start for a in final if a.chunks]
    gaps = np.concatenate([np.diff(a.chunks) for a in final if len(a.chunks) > 1] or [np.zeros(1)])
    row = {
        "requests/s": len(final) / wall,
        "tokens/s": tokens / wall,
        "TTFT p50 ms": 1000 * float(np.median(ttft)),
        "ITL p50 ms": 1000 * float(np.percentile(gaps, 50)),
        "ITL p99 ms": 1000 * float(np.percentile(gaps, 99)),
    }
    return row, [a.text for a in final]


def genai_level(
    folder: pathlib.Path, prompts: list[str], new: int
) -> dict[str, tuple[dict[str, float], list[str]]]:
    """onnxruntime-genai in-process: the prompts one after another, then as one batch."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    rows = [[1, *(int(w[1:]) for w in p.split())] for p in prompts]
    length = len(rows[0])

    def generator(batch: int) -> Any:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=length + new, do_sample=False, batch_size=batch)
        return og.Generator(model, params)

    begin = time.perf_counter()
    firsts, gaps, texts = [], [], []
    for row in rows:
        g = generator(1)
        g.append_tokens(np.array([row], np.int64))
        times = []
        while not g.is_done():
            g.generate_next_token()
            times.append(time.perf_counter())
        firsts.append(times[0] - begin)
        gaps += list(np.diff(times))
        texts.append(_words(np.asarray(g.get_sequence(0))[length:]))
    wall = time.perf_counter() - begin
    results = {"genai sequential": (_row(len(rows), texts, wall, firsts, gaps), texts)}
    begin = time.perf_counter()
    g = generator(len(rows))
    g.append_tokens(np.array(rows, np.int64))
    times = []
    while not g.is_done():
        g.generate_next_token()
        times.append(time.perf_counter())
    wall = time.perf_counter() - begin
    texts = [_words(np.asarray(g.get_sequence(i))[length:]) for i in range(len(rows))]
    firsts = [times[0] - begin] * len(rows)
    results["genai batched"] = (_row(len(rows), texts, wall, firsts, list(np.diff(times))), texts)
    return results


def _words(tokens: np.ndarray) -> str:
    return " ".join(f"t{int(t)}" for t in tokens if int(t) != 2)


def _row(
    requests: int, texts: list[str], wall: float, firsts: list[float], gaps: list[float]
) -> dict[str, float]:
    tokens = sum(len(t.split()) for t in texts)
    gap = np.array(gaps or [0.0])
    return {
        "requests/s": requests / wall,
        "tokens/s": tokens / wall,
        "TTFT p50 ms": 1000 * float(np.median(firsts)),
        "ITL p50 ms": 1000 * float(np.percentile(gap, 50)),
        "ITL p99 ms": 1000 * float(np.percentile(gap, 99)),
    }


Rounds = dict[tuple[str, int], list[dict[str, float]]]


def measure(
    servers: dict[str, Server], args: argparse.Namespace
) -> tuple[Rounds, dict[tuple[str, int], list[str]]]:
    """Each level on each server in turn, ``--rounds`` times; every round's row kept."""
    rounds: Rounds = {}
    texts: dict[tuple[str, int], list[str]] = {}
    for round_ in range(args.rounds):
        for level in args.concurrency:
            prompts = prompts_for(level * args.requests)
            for name, server in servers.items():
                row, got = run_level(server, prompts, level, args.new)
                print(f"round {round_} {name} x{level}: {row}", flush=True)
                rounds.setdefault((name, level), []).append(row)
                texts[(name, level)] = got
    return rounds, texts


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's median over the rounds, and the tokens/s range."""
    row = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    row["tokens/s min"] = min(r["tokens/s"] for r in rows)
    row["tokens/s max"] = max(r["tokens/s"] for r in rows)
    return row


def _same(ours: list[str], theirs: list[str]) -> str:
    return f"{sum(a == b for a, b in zip(ours, theirs, strict=True))}/{len(theirs)}"


def prompts_for(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"t{t}" for t in rng.integers(3, 32000, PROMPT_WORDS)) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--new", type=int, default=16, help="new tokens a request (16)")
    parser.add_argument("--requests", type=int, default=1, help="requests a client (1)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int4"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds, medians kept (3)")
    parser.add_argument(
        "--theirs",
        nargs="+",
        default=["default", "cb"],
        choices=["default", "cb"],
        help="transformers serve's modes: default, cb (--continuous-batching)",
    )
    parser.add_argument("--their-cb", action="store_true", help="same as --theirs cb")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--genai", action="store_true", help="onnxruntime-genai in-process too")
    parser.add_argument("--work", type=pathlib.Path, default=None, help="keep builds here")
    args = parser.parse_args()
    if args.their_cb:
        args.theirs = ["cb"]
    work = args.work or pathlib.Path(tempfile.mkdtemp(prefix="bench-openai-"))
    checkpoint = work / "checkpoint"
    if not (checkpoint / "config.json").is_file():
        build_checkpoint(checkpoint)
    servers: dict[str, Server] = {}
    try:
        for precision in args.precisions:
            folder = work / f"onnx-{precision}"
            if not (folder / "model.onnx").is_file():
                export(checkpoint, folder, precision)
            log = work / f"ours-{precision}.log"
            servers[_label(precision)] = start_ours(folder, args.threads, log)
        for mode in [] if args.skip_transformers else args.theirs:
            label = "transformers serve" + (" (CB)" if mode == "cb" else "")
            log = work / f"theirs-{mode}.log"
            servers[label] = start_transformers(checkpoint, args.threads, mode == "cb", log)
        rounds, texts = measure(servers, args)
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    for (name, level), measured in rounds.items():
        ours = texts.get(("ours fp32", level))
        got = texts[(name, level)]
        same = "" if ours is None or name == "ours fp32" else _same(ours, got)
        rows.append((name, level, _median(measured), same))
    if args.genai:
        try:
            rows += genai_rows(checkpoint, work, texts, args)
        except Exception as e:  # the servers' table still prints
            print(f"genai failed: {type(e).__name__}: {e}")
    _table(rows)
    _ratios(rounds)


def _ratios(rounds: Rounds) -> None:
    """Ours over theirs in tokens/s, round by round (both ran in the same round)."""
    print()
    for (name, level), ours in sorted(rounds.items(), key=lambda item: (item[0][1], item[0][0])):
        if not name.startswith("ours"):
            continue
        cells = []
        for (their, their_level), theirs in sorted(rounds.items()):
            if their_level != level or not their.startswith("transformers"):
                continue
            by_round = [a["tokens/s"] / b["tokens/s"] for a, b in zip(ours, theirs, strict=True)]
            cells.append(
                f"{np.median(by_round):.2f}x ({min(by_round):.2f}-{max(by_round):.2f}) {their}"
            )
        if cells:
            print(f"{name} x{level} tokens/s, median (range) over rounds: " + ", ".join(cells))


def genai_rows(
    checkpoint: pathlib.Path,
    work: pathlib.Path,
    texts: dict[tuple[str, int], list[str]],
    args: argparse.Namespace,
) -> list[tuple[str, int, dict[str, float], str]]:
    """onnxruntime-genai's rows: its own fp32 build, the same prompts in-process."""
    from bench.bench_genai import build_genai, set_genai_threads

    rows = []
    folder = work / "genai-fp32"
    if not (folder / "genai_config.json").is_file():
        build_genai(checkpoint, folder, "fp32", dict(os.environ))
    set_genai_threads(folder, args.threads)
    for level in args.concurrency:
        prompts = prompts_for(level * args.requests)
        for label, (row, got) in genai_level(folder, prompts, args.new).items():
            ours = texts.get(("ours fp32", level))
            same = "" if ours is None else _same(ours, got)
            rows.append((label, level, row, same))
            print(f"{label} x{level}: {row} same as ours fp32: {same}", flush=True)
    return rows


def _table(rows: list[tuple[str, int, dict[str, float], str]]) -> None:
    keys = ["requests/s", "TTFT p50 ms", "ITL p50 ms", "ITL p99 ms"]
    head = "| server | clients | tokens/s (range) | " + " | ".join(keys)
    print("\n" + head + " | texts equal to ours fp32 |")
    print("|---|---|---|" + "---|" * len(keys) + "---|")
    for name, level, row, same in sorted(rows, key=lambda r: (r[1], r[0])):
        spread = ""
        if "tokens/s min" in row:
            spread = f" ({row['tokens/s min']:,.1f}-{row['tokens/s max']:,.1f})"
        cells = " | ".join(f"{row[k]:,.1f}" for k in keys)
        print(f"| {name} | {level} | {row['tokens/s']:,.1f}{spread} | {cells} | {same or '-'} |")


if __name__ == "__main__":
    main()
