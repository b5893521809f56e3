"""Structured output and n-gram speculation side by side with onnxruntime-genai.

One random-weight Llama (``llama-5M``'s shape: vocabulary 4000, hidden 256, 4 layers) with
a byte-level BPE tokenizer trained here (``bench_structured.train_tokenizer``), exported
by us (default target) and by genai's model builder (fp32), 1 thread each, batch 1;
rounds alternate between the tools, best of ``--repeat``.

Ours runs three times: the default graph (``ours``), the fused ``target="onnxruntime"``
one (``fused``, GroupQueryAttention as genai's) and the fused one with int4 weights
(``int4``, MatMulNBits; ``genai-int4`` is genai's int4 build, in the speculation table).

- **structured output**: a JSON schema (bounded strings, an enum, a boolean) through
  ``generate(json_schema=...)`` and through genai's ``set_guidance("json_schema", ...)``
  (llguidance in both; whitespace off in both, ``x-guidance``), against each tool's own
  unconstrained decoding of as many tokens: milliseconds per new token (the prompt
  included), and the mask's cost per token (the difference); every document is checked to
  parse and validate.
- **speculation**: a repetitive prompt (a 7-token phrase 8 times, as a summary quoting its
  source), 64 and 128 new tokens (``--new``), greedy: ours timed as the user's whole
  ``generate(prompt_lookup_num_tokens=16)`` call (n-grams up to 2; each step verifies as
  many of the drafts as pay off, ``DraftLength``; the acceptance from an untimed rerun)
  against genai's n-gram decoding (``ngram_size=2, max_draft_tokens=16``); each round runs
  plain and n-gram decoding for each tool, and the table gives the medians over
  ``--rounds`` (tokens/s), the median of each round's speed-up and their range, the
  acceptance and whether the tokens equal plain greedy's. Besides the whole call, each
  round times the decoding phase (the tokens after the first, over the seconds after the
  prompt's step: what a streaming user sees after the first token) in a second pair of
  runs, with its own speed-up column (``decode``). A random model falls into a
  loop of a few tokens, which prompt lookup then drafts well: the acceptance here is an
  upper end, not a trained model's. The fused decoders verify the drafts on their shared
  cache (their logits hold every new token's in a step after a past).
  ``--int4-block-size 64 128`` adds fused int4 rows of other block sizes.
- **continuous batching**: 1, 4 and 16 requests (prompts of 8-40 tokens, 16-48 new
  tokens each) at once against one after another, tokens compared with each tool's
  sequential ones: ours through ``batcher()`` (default graph: a left-padded batch cache;
  fused and int4: a slot per request in one shared buffer), genai through its ``Engine``
  (``engine.static_batching.max_batch_size`` 16) against its ``Generator``.

    python bench/bench_genai_features.py [--repeat 5] [--rounds 7] [--clock wall|cpu]
        [--only structured speculation batching] [--int4-block-size 64 128] [--new 64 128]
        [--genai-path DIR]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench_genai.py

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import transformers as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.bench_genai import set_genai_threads
from bench.bench_structured import train_tokenizer
from onnx_export import hf
from onnx_export.hf.runtime.generation._generate import Stopping
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._speculative import (
    ChunkRunner,
    DraftLength,
    PromptLookup,
    speculative_decode,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "city": {"type": "string", "maxLength": 12},
        "admin": {"type": "boolean"},
        "role": {"enum": ["reader", "writer", "owner"]},
    },
    "required": ["name", "city", "admin", "role"],
    "additionalProperties": False,
}
PHRASE = [5, 9, 13, 17, 21, 25, 29]
REPEATING = np.array([[0, *PHRASE * 8]], np.int64)
PLAIN_PROMPT = np.array([[0, *range(40, 72)]], np.int64)
NEW = 64


def checkpoint(folder: pathlib.Path) -> None:
    """The random Llama and its byte-level BPE tokenizer, saved into ``folder``."""
    config = tf.LlamaConfig(
        vocab_size=4000,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).eval().save_pretrained(folder)
    train_tokenizer(4000, folder)
    config_file = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>"}
    config_file["eos_token"] = "</s>"
    (folder / "tokenizer_config.json").write_text(json.dumps(config_file))


def build_genai(
    ckpt: pathlib.Path, out: pathlib.Path, env: dict[str, str], precision: str = "fp32"
) -> None:
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt)]
    command += ["-o", str(out), "-p", precision, "-e", "cpu", "-c", str(out.parent / "cache")]
    subprocess.run(command, check=True, env=env, capture_output=True)
    set_genai_threads(out, 1)
    path = out / "genai_config.json"  # its Engine batches up to 4 requests unless told
    config = json.loads(path.read_text())
    config["engine"] = {"static_batching": {"max_batch_size": 16}}
    path.write_text(json.dumps(config, indent=4))


#: A tool's run: (prompt, new tokens) -> (new tokens, seconds, acceptance or None).
Run = Callable[[np.ndarray, int], tuple[np.ndarray, float, float | None]]
#: A tool's run timed after its first new token: (prompt, new tokens) -> (new tokens, the
#: seconds from the first new token to the last; the decoding phase, the prompt's step left
#: out), acceptance ``None``.
Phase = Run
#: Which clock the runs read: "wall" (perf_counter) or "cpu" (this process's CPU seconds,
#: less moved by other processes on a shared machine; one thread each).
CLOCK = {"name": "wall"}
#: The most drafts a step verifies (ours: ``prompt_lookup_num_tokens``, which verifies as many
#: of them as pay off; genai: ``max_draft_tokens``).
LOOKUP = {"tokens": 16}


def _now() -> float:
    return time.process_time() if CLOCK["name"] == "cpu" else time.perf_counter()


def _since(start: float) -> float:
    return _now() - start


def ours(folder: pathlib.Path) -> dict[str, Run]:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.log_severity_level = 3  # a verification step's logits: more than declared
    model = hf.OrtModelForCausalLM.from_pretrained(folder, session_options=options)

    def timed(**kwargs: Any) -> Run:
        def run(ids: np.ndarray, new: int) -> tuple[np.ndarray, float, float | None]:
            start = _now()
            out = model.generate(ids, max_new_tokens=new, **kwargs)
            return out[0, ids.shape[1] :], _since(start), None

        return run

    def lookup(ids: np.ndarray, new: int) -> tuple[np.ndarray, float, float | None]:
        # the user's whole call is timed; the acceptance comes from a second, untimed run
        # of what it runs (the same tokens), which gives its statistics
        start = _now()
        out = model.generate(
            ids, max_new_tokens=new, eos_token_id=[], prompt_lookup_num_tokens=LOOKUP["tokens"]
        )
        seconds = _since(start)
        runner = ChunkRunner(model.session, uses_positions=True, capacity=ids.shape[1] + new)
        stopping = Stopping.resolve(new, [], None)
        drafter = PromptLookup(LOOKUP["tokens"], 2)
        again, stats = speculative_decode(
            runner, drafter, ids, TokenChooser(), stopping, schedule=DraftLength()
        )
        if not np.array_equal(again, out):
            raise AssertionError("generate(prompt_lookup_num_tokens=) and its loop differ")
        return out[0, ids.shape[1] :], seconds, stats.acceptance

    def phased(**kwargs: Any) -> Phase:
        def run(ids: np.ndarray, new: int) -> tuple[np.ndarray, float, float | None]:
            # a streamer hears of each new token; its first call comes after the prompt's
            # step (it reads the clock once, then only returns)
            first: list[float] = []

            def heard(tokens: np.ndarray) -> None:
                if not first:
                    first.append(_now())

            out = model.generate(ids, max_new_tokens=new, eos_token_id=[], streamer=heard, **kwargs)
            return out[0, ids.shape[1] :], _since(first[0]), None

        return run

    return {
        "plain": timed(eos_token_id=[]),
        "json": timed(json_schema=SCHEMA),
        "lookup": lookup,
        "plain-decode": phased(),
        "lookup-decode": phased(prompt_lookup_num_tokens=LOOKUP["tokens"]),
    }


def genai(folder: pathlib.Path) -> dict[str, Run]:
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    guided = json.dumps({**SCHEMA, "x-guidance": {"whitespace_flexible": False}})

    def timed(guidance: bool = False, ngram: bool = False, decode: bool = False) -> Run:
        """``decode``: the seconds after the first new token (its prompt's step left out)."""

        def run(ids: np.ndarray, new: int) -> tuple[np.ndarray, float, float | None]:
            start = _now()
            params = og.GeneratorParams(model)
            length = ids.shape[1] + new
            if guidance:
                params.set_search_options(max_length=length, do_sample=False)
                params.set_guidance("json_schema", guided)
            else:
                params.set_search_options(max_length=length, min_length=length, do_sample=False)
            if ngram:
                params.set_speculative_options(ngram_size=2, max_draft_tokens=LOOKUP["tokens"])
            generator = og.Generator(model, params)
            generator.append_tokens(ids.astype(np.int32))  # runs the prompt
            generator.generate_next_token()  # the first new token, from the prompt's logits
            if decode:
                start = _now()
            while not generator.is_done():
                generator.generate_next_token()
            seconds = _since(start)
            stats = generator.get_speculative_stats() if ngram else {}
            out = np.asarray(generator.get_sequence(0))[ids.shape[1] :]
            return out, seconds, stats.get("acceptance_rate")

        return run

    return {
        "plain": timed(),
        "json": timed(guidance=True),
        "lookup": timed(ngram=True),
        "plain-decode": timed(decode=True),
        "lookup-decode": timed(ngram=True, decode=True),
    }


def best(
    tools: dict[str, dict[str, Run]],
    mode: str,
    ids: np.ndarray,
    repeat: int,
    new: Callable[[str], int] = lambda name: NEW,
) -> dict[str, tuple[np.ndarray, float, float | None]]:
    """Each tool's ``mode`` on ``ids``, rounds alternating, the fastest of each."""
    results: dict[str, tuple[np.ndarray, float, float | None]] = {}
    for _ in range(repeat):
        for name, runs in tools.items():
            if mode not in runs:
                continue
            out = runs[mode](ids, new(name))
            if name not in results or out[1] < results[name][1]:
                results[name] = out
    return results


#: A batching run: (prompts, new tokens each) -> each request's new tokens.
Batch = Callable[[list[list[int]], list[int]], list[list[int]]]


def our_batching(folder: pathlib.Path) -> dict[str, Batch]:
    """``generate()`` one request after another, and ``batcher()`` with all at once."""
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.log_severity_level = 3  # a verification step's logits: more than declared
    model = hf.OrtModelForCausalLM.from_pretrained(folder, session_options=options)

    def sequential(prompts: list[list[int]], news: list[int]) -> list[list[int]]:
        return [
            model.generate([p], max_new_tokens=n, eos_token_id=[])[0, len(p) :].tolist()
            for p, n in zip(prompts, news, strict=True)
        ]

    def batched(prompts: list[list[int]], news: list[int]) -> list[list[int]]:
        batcher = model.batcher()
        ids = [batcher.submit(p, max_new_tokens=n) for p, n in zip(prompts, news, strict=True)]
        done = {r.id: r.tokens for r in batcher.run()}
        return [done[i] for i in ids]

    return {"sequential": sequential, "batched": batched}


def genai_batching(folder: pathlib.Path) -> dict[str, Batch]:
    """genai's ``Generator`` one request after another, and its ``Engine`` with all at once."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))

    def sequential(prompts: list[list[int]], news: list[int]) -> list[list[int]]:
        out = []
        for prompt, new in zip(prompts, news, strict=True):
            params = og.GeneratorParams(model)
            length = len(prompt) + new
            params.set_search_options(max_length=length, min_length=length, do_sample=False)
            generator = og.Generator(model, params)
            generator.append_tokens(np.array([prompt], np.int32))
            while not generator.is_done():
                generator.generate_next_token()
            out.append([int(t) for t in generator.get_sequence(0)[len(prompt) :]])
        return out

    def batched(prompts: list[list[int]], news: list[int]) -> list[list[int]]:
        engine = og.Engine(model)
        events = engine.create_event_buffer(4096)
        requests, tokens = [], {}
        for prompt, new in zip(prompts, news, strict=True):
            request = engine.create_request()
            options = og.TurnOptions(request)
            options.set_max_generated_tokens(new)
            options.set_min_generated_tokens(new)
            options.set_do_sample(False)
            request.begin_turn(np.array(prompt, np.int32), options)
            requests.append(request)
            tokens[id(request)] = []
        while engine.has_pending_requests():
            for event in engine.run(events):
                tokens[id(event.request)].append(int(event.token))
        for request in requests:
            request.close()
        return [tokens[id(r)] for r in requests]

    return {"sequential": sequential, "batched": batched}


def batching(tools: dict[str, dict[str, Batch]], repeat: int) -> None:
    """Requests/s of N requests at once against one after another, each tool; rounds alternate."""
    rng = np.random.default_rng(0)
    print(
        f"{'tool':<6} {'requests':>8} {'sequential req/s':>16} {'batched req/s':>13} "
        f"{'ratio':>6} same"
    )
    for count in (1, 4, 16):
        prompts = [rng.integers(3, 4000, int(rng.integers(8, 40))).tolist() for _ in range(count)]
        news = [int(n) for n in rng.integers(16, 48, count)]
        seconds: dict[tuple[str, str], float] = {}
        tokens: dict[tuple[str, str], list[list[int]]] = {}
        for _ in range(repeat):
            for name, runs in tools.items():
                for mode, run in runs.items():
                    start = _now()
                    tokens[name, mode] = run(prompts, news)
                    took = _since(start)
                    seconds[name, mode] = min(seconds.get((name, mode), took), took)
        for name in tools:
            alone, together = seconds[name, "sequential"], seconds[name, "batched"]
            same = tokens[name, "sequential"] == tokens[name, "batched"]
            print(
                f"{name:<6} {count:>8} {count / alone:>16.1f} {count / together:>13.1f} "
                f"{alone / together:>5.2f}x {same}"
            )


def structured_output(tools: dict[str, dict[str, Run]], repeat: int, tokenizer: Any) -> None:
    """ms per new token with a JSON schema against as many unconstrained tokens."""
    print(f"structured output (JSON schema), ms per new token ({CLOCK['name']}), best of {repeat}")
    guided = best(tools, "json", PLAIN_PROMPT, repeat)
    # unconstrained decoding of as many tokens as each tool's document
    structured = {name: runs for name, runs in tools.items() if name in guided}
    plain = best(structured, "plain", PLAIN_PROMPT, repeat, lambda n: len(guided[n][0]))
    print(f"{'tool':<6} {'plain':>7} {'json':>7} {'mask/token':>10} {'tokens':>6} valid")
    for name in guided:
        per_plain = plain[name][1] / len(plain[name][0]) * 1e3
        tokens = guided[name][0]
        per_json = guided[name][1] / len(tokens) * 1e3
        print(
            f"{name:<6} {per_plain:>7.2f} {per_json:>7.2f} {per_json - per_plain:>10.2f} "
            f"{len(tokens):>6} {valid(tokens, tokenizer)}"
        )


def speculation(tools: dict[str, dict[str, Run]], rounds: int, news: list[int]) -> None:
    """Plain and n-gram decoding of the repetitive prompt, each round both for each tool.

    Each round's speed-up is its plain time over its speculative time (the same moment of
    a shared machine); the table gives the medians over the rounds and the speed-ups' range.
    Two timings per decoding: the user's whole call (``whole``: set-up, the prompt's step,
    every new token), and, from a second pair of runs in the same round, the decoding phase
    (``decode``: the seconds after the first new token, for the tokens after it; ours hears
    of the first token through a streamer, genai's after its first ``generate_next_token``).
    """
    print(
        f"\nn-gram speculation on a repetitive prompt ({REPEATING.shape[1]} tokens), greedy, "
        f"drafts up to {LOOKUP['tokens']}: medians of {rounds} rounds ({CLOCK['name']} clock), "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'tool':<10} {'new':>3} {'plain tok/s':>11} {'ngram tok/s':>11} {'whole':>6} "
        f"{'range':>11} {'decode':>6} {'range':>11} {'accepted':>8} same-tokens"
    )
    for new in news:
        seconds: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in tools}
        last: dict[str, tuple[Any, ...]] = {}
        for _ in range(rounds):
            for name, runs in tools.items():
                plain = runs["plain"](REPEATING, new)
                spec = runs["lookup"](REPEATING, new)
                plain_d = runs["plain-decode"](REPEATING, new)
                spec_d = runs["lookup-decode"](REPEATING, new)
                seconds[name].append((plain[1], spec[1], plain_d[1], spec_d[1]))
                last[name] = plain, spec, plain_d, spec_d
        for name in tools:
            rows = np.array(seconds[name])
            plain_s, spec_s = np.median(rows[:, 0]), np.median(rows[:, 1])
            whole = np.sort(rows[:, 0] / rows[:, 1])
            decode = np.sort(rows[:, 2] / rows[:, 3])
            plain, spec, plain_d, spec_d = last[name]
            same = all(np.array_equal(plain[0], o[0]) for o in (spec, plain_d, spec_d))
            print(
                f"{name:<10} {new:>3} {new / plain_s:>11.0f} {new / spec_s:>11.0f} "
                f"{np.median(whole):>5.2f}x {whole[0]:>5.2f}-{whole[-1]:.2f}x "
                f"{np.median(decode):>5.2f}x {decode[0]:>5.2f}-{decode[-1]:.2f}x "
                f"{spec[2] or 0.0:>8.2f} {same}"
            )
    print(f"load at the end {os.getloadavg()[0]:.1f}")


def valid(tokens: np.ndarray, tokenizer: Any) -> bool:
    import jsonschema

    text = tokenizer.decode([int(t) for t in tokens], skip_special_tokens=True)
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--genai-path", default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--rounds", type=int, default=7, help="speculation rounds (medians)")
    parser.add_argument("--lookup-tokens", type=int, default=LOOKUP["tokens"])
    parser.add_argument(
        "--new", type=int, nargs="+", default=[NEW, 2 * NEW], help="speculation: new tokens"
    )
    parser.add_argument(
        "--int4-block-size", type=int, nargs="*", default=[], help="more fused int4 rows"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("structured", "speculation", "batching"),
        default=("structured", "speculation", "batching"),
    )
    args = parser.parse_args()
    CLOCK["name"] = args.clock
    LOOKUP["tokens"] = args.lookup_tokens
    sections = set(args.only)
    env = dict(os.environ)
    if args.genai_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.genai_path, env.get("PYTHONPATH")]))
        sys.path.insert(0, args.genai_path)
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        checkpoint(root / "ckpt")
        hf.export_pretrained(root / "ckpt", root / "ours")
        hf.export_pretrained(root / "ckpt", root / "fused", target="onnxruntime")
        hf.export_pretrained(root / "ckpt", root / "int4", target="onnxruntime", quantize="int4")
        for block in args.int4_block_size:  # more int4 rows: other block sizes
            hf.export_pretrained(
                root / "ckpt",
                root / f"int4-b{block}",
                target="onnxruntime",
                quantize="int4",
                quantize_block_size=block,
            )
        build_genai(root / "ckpt", root / "genai", env)
        build_genai(root / "ckpt", root / "genai-int4", env, "int4")
        tokenizer = Tokenizer.from_file(str(root / "ckpt" / "tokenizer.json"))
        int4 = ours(root / "int4")
        del int4["json"]  # the speculation and batching tables only
        genai_int4 = genai(root / "genai-int4")
        del genai_int4["json"]
        tools = {
            "ours": ours(root / "ours"),
            "fused": ours(root / "fused"),
            "int4": int4,
            **{f"int4-b{b}": ours(root / f"int4-b{b}") for b in args.int4_block_size},
            "genai": genai(root / "genai"),
            "genai-int4": genai_int4,
        }
        if "structured" in sections:
            structured_output(tools, args.repeat, tokenizer)
        if "speculation" in sections:
            speculation(tools, args.rounds, args.new)
        if "batching" in sections:
            print("\ncontinuous batching: prompts of 8-40, 16-48 new tokens, greedy")
            batched = {name: our_batching(root / name) for name in ("ours", "fused", "int4")}
            batched["genai"] = genai_batching(root / "genai")
            batching(batched, max(1, args.repeat // 3))


if __name__ == "__main__":
    main()
