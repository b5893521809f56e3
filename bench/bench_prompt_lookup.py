"""Where a prompt-lookup decoding spends its time, and how well its drafts are chosen.

Issue #40 asks the fused int4 decoder for 1.5x from prompt lookup. This bench takes
``bench_genai_features.py``'s model (a random ~5M Llama, vocabulary 4000) and prompt (a
7-token phrase 8 times), exports the fused decoder (fp32 and int4, the default block 32
and accuracy level 4) and, 1 thread:

- **breakdown**: ``generate(max_new_tokens=64)`` plain and with
  ``prompt_lookup_num_tokens=16``, rounds alternating, medians: the whole call, the
  prompt's step, the steps that verified no draft and those that verified some (ORT's
  run only), and the rest (Python: the set-up, the bindings, the n-gram index, the greedy
  choice); how many steps had no n-gram to draft from, and how many drafts were verified.
- **step costs**: one step of 1 and of 9 tokens after the 57-token prompt (medians), from
  which the replay below takes a one-token step's cost and what a draft adds.
- **draft choice**: six greedy decodings (fp32 and int4, three prompts) replayed with the
  measured costs: prompt lookup with transformers' rule (the earliest earlier n-gram) and
  with ours (the latest), each with ``DraftLength`` choosing how many drafts a step
  verifies, against the best choice knowing the tokens ahead (a dynamic programme); the
  speed-up is a modelled plain decoding's time over each.
- **ceiling** (issue #40's third round): the whole ``generate()`` call on the fused int4
  decoder, plain, with ``DraftLength`` and with the best choice's lengths (each step
  verifies what the dynamic programme, knowing the plain tokens, chose for that point:
  what no schedule can beat with these drafts and costs), rounds alternating, 64 and 128
  new tokens; and the bound if every token after the first came in steps of 17 (all 16
  drafts right from the first step on), from the measured step costs.

    python bench/bench_prompt_lookup.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.bench_genai_features import NEW, PLAIN_PROMPT, REPEATING, checkpoint
from onnx_export import hf
from onnx_export.hf.runtime.generation import _causal, _shared_cache
from onnx_export.hf.runtime.generation._speculative import ChunkRunner, DraftLength, PromptLookup

LOOKUP = 16
#: A third prompt: a 30-token run of ids three times.
LOOPED = np.array([[0, *range(100, 130), *range(100, 130), *range(100, 130)]], np.int64)


class Probe:
    """Times each ORT run of the shared caches made while it is on, and what lookup drafts."""

    def __init__(self) -> None:
        self.runs: list[float] = []
        self.offered: list[int] = []
        self.where = [0]  # the sequence's length at the last proposal
        self.on = False
        make, propose = _shared_cache.SharedCache.__init__, PromptLookup.propose
        probe = self

        def init(cache: Any, *args: Any, **kwargs: Any) -> None:
            make(cache, *args, **kwargs)
            inner = cache._run

            def timed(binding: Any, options: Any) -> None:
                start = time.perf_counter()
                inner(binding, options)
                if probe.on:
                    probe.runs.append(time.perf_counter() - start)

            cache._run = timed

        def proposed(lookup: PromptLookup, sequence: list[int], count: int) -> list[int]:
            probe.where[0] = len(sequence)
            drafts = propose(lookup, sequence, count)
            if probe.on:
                probe.offered.append(len(drafts))
            return drafts

        _shared_cache.SharedCache.__init__ = init  # type: ignore[method-assign]
        PromptLookup.propose = proposed  # type: ignore[method-assign]


def breakdown(models: dict[str, Any], rounds: int, probe: Probe) -> dict[str, float]:
    """Prints the table; returns int4's Python seconds a step, plain and with n-grams."""
    print(
        f"\nbreakdown: generate(), {NEW} new tokens after the {REPEATING.shape[1]}-token "
        f"repetitive prompt, medians of {rounds} rounds (wall clock, ms; steps in brackets)"
    )
    print(
        f"{'decoder':<8} {'mode':<7} {'whole':>6} {'prompt':>6} {'1-token':>12} "
        f"{'verify':>12} {'python':>6} {'no n-gram':>9} {'drafts':>6}"
    )
    python: dict[str, float] = {}
    run = ChunkRunner.run
    for name, model in models.items():
        rows: dict[str, list[tuple[float, ...]]] = {"plain": [], "n-gram": []}
        for _ in range(rounds):
            for mode, extra in (("plain", {}), ("n-gram", {"prompt_lookup_num_tokens": LOOKUP})):
                sizes: list[int] = []

                def sized(
                    runner: ChunkRunner,
                    tokens: list[int],
                    wanted: int | None = None,
                    sizes: list[int] = sizes,
                ) -> Any:
                    sizes.append(len(tokens))
                    return run(runner, tokens, wanted)

                ChunkRunner.run = sized  # type: ignore[method-assign]
                probe.runs, probe.offered, probe.on = [], [], True
                start = time.perf_counter()
                model.generate(REPEATING, max_new_tokens=NEW, eos_token_id=[], **extra)
                whole = time.perf_counter() - start
                probe.on = False
                ChunkRunner.run = run  # type: ignore[method-assign]
                runs = probe.runs
                if not sizes:  # plain: the prompt's step, then one token a step
                    sizes = [REPEATING.shape[1]] + [1] * (len(runs) - 1)
                one = [t for t, k in zip(runs[1:], sizes[1:], strict=True) if k == 1]
                many = [(t, k) for t, k in zip(runs[1:], sizes[1:], strict=True) if k > 1]
                rows[mode].append(
                    (
                        whole,
                        runs[0],
                        sum(one),
                        len(one),
                        sum(t for t, _ in many),
                        len(many),
                        whole - sum(runs),
                        probe.offered.count(0),
                        sum(k - 1 for _, k in many),
                    )
                )
        for mode, values in rows.items():
            m = np.median(np.array(values), axis=0)
            print(
                f"{name:<8} {mode:<7} {m[0] * 1e3:>6.2f} {m[1] * 1e3:>6.2f} "
                f"{m[2] * 1e3:>5.2f} ({m[3]:>3.0f}) {m[4] * 1e3:>5.2f} ({m[5]:>3.0f}) "
                f"{m[6] * 1e3:>6.2f} {m[7]:>9.0f} {m[8]:>6.0f}"
            )
            if name == "int4":
                python[mode] = float(m[6] / (m[3] + m[5] + 1))
    return python


def step_costs(model: Any, rounds: int) -> tuple[float, float, float]:
    """(the prompt's step, a one-token step, what a draft adds), seconds, medians."""
    prompt, one, nine = [], [], []
    tokens = REPEATING[0].tolist()
    for _ in range(rounds * 3):
        runner = ChunkRunner(model.session, uses_positions=True, capacity=128)
        start = time.perf_counter()
        runner.run(tokens, 1)
        prompt.append(time.perf_counter() - start)
        start = time.perf_counter()
        runner.run([7], 1)
        one.append(time.perf_counter() - start)
        start = time.perf_counter()
        runner.run(list(range(200, 209)), 9)
        nine.append(time.perf_counter() - start)
    single = float(np.median(one))
    return float(np.median(prompt)), single, (float(np.median(nine)) - single) / 8


class Earliest(PromptLookup):
    """transformers' rule: the earliest earlier occurrence of the n-gram."""

    def propose(self, sequence: list[int], count: int) -> list[int]:
        length, count = len(sequence), min(count, self.num_tokens)
        for size in range(min(self.max_ngram, length - 1), 0, -1):
            tail = sequence[length - size :]
            for start in range(length - size):
                if sequence[start : start + size] == tail:
                    extended = list(sequence)
                    while len(extended) < length + count:
                        extended.append(extended[len(extended) - (length - start - size)])
                    return extended[length : length + count]
        return []


def replay(
    prompt: list[int], new: list[int], lookup: PromptLookup, costs: tuple[float, float, float]
) -> float:
    """The modelled seconds of a lookup decoding of ``new`` with DraftLength's choices."""
    first, single, extra = costs
    schedule, sequence, total = DraftLength(), list(prompt), first
    while len(sequence) - len(prompt) < len(new):
        left = len(new) - (len(sequence) - len(prompt))
        offered = lookup.propose(sequence, left - 1) if left > 1 else []
        drafts = offered[: schedule.length(len(offered))] if offered and total > first else []
        truth = new[len(sequence) - len(prompt) :]
        kept = 0
        while kept < len(drafts) and drafts[kept] == truth[kept]:
            kept += 1
        seconds = single + extra * len(drafts)
        if len(sequence) > len(prompt):  # the prompt's step is not recorded
            # as speculative_decode: the step's own token against the next draft offered
            matched = kept + (kept < len(offered) and truth[kept] == offered[kept])
            missed = matched < min(kept + 1, len(offered))
            schedule.record(len(drafts) + 1, seconds, matched, missed)
            total += seconds
        sequence += truth[: kept + 1]
    return total


def best_choice(prompt: list[int], new: list[int], costs: tuple[float, float, float]) -> float:
    """The least modelled seconds with our drafts, knowing the tokens ahead."""
    first, single, extra = costs
    sequence = prompt + new

    @functools.cache
    def rest(made: int) -> float:
        if made >= len(new):
            return 0.0
        left = len(new) - made
        drafts = PromptLookup(LOOKUP).propose(sequence[: len(prompt) + made], left - 1)
        run = 0
        while run < len(drafts) and drafts[run] == new[made + run]:
            run += 1
        return min(single + extra * d + rest(made + d + 1) for d in range(run + 1))

    return first + rest(1)


def best_plan(
    prompt: list[int], new: list[int], costs: tuple[float, float, float]
) -> dict[int, int]:
    """The best choice's drafts to verify at each sequence length it reaches (knowing ``new``)."""
    _, single, extra = costs
    sequence = prompt + new

    @functools.cache
    def rest(made: int) -> tuple[float, int]:
        if made >= len(new):
            return 0.0, 0
        drafts = PromptLookup(LOOKUP).propose(sequence[: len(prompt) + made], len(new) - made - 1)
        run = 0
        while run < len(drafts) and drafts[run] == new[made + run]:
            run += 1
        return min((single + extra * d + rest(made + d + 1)[0], d) for d in range(run + 1))

    plan, made = {}, 1
    while made < len(new):
        plan[len(prompt) + made] = rest(made)[1]
        made += plan[len(prompt) + made] + 1
    return plan


class BestChoice:
    """A schedule verifying the best choice's drafts: ``plan`` by the sequence's length,
    which ``where`` holds (the length at the last proposal, set by :class:`Probe`)."""

    def __init__(self, plan: dict[int, int], where: list[int]) -> None:
        self.plan, self.where = plan, where

    def length(self, available: int) -> int:
        return min(available, self.plan.get(self.where[0], 0))

    def record(self, tokens: int, seconds: float, matched: int, missed: bool) -> None:
        """The plan does not learn."""


def ceiling(model: Any, costs: tuple[float, float, float], probe: Probe, rounds: int) -> None:
    """Whole calls: plain, DraftLength and the best choice's lengths; the all-right bound."""
    first, single, extra = costs
    print(
        f"\nceiling: int4 generate(), whole call, medians of {rounds} rounds (wall clock), "
        f"speed-up: the median of the rounds' plain time over each; load {os.getloadavg()[0]:.1f}"
    )
    header = f"{'new':>4} {'plain ms':>8} {'ours ms':>7} {'best ms':>7} {'ours':>6} {'best':>6}"
    print(header, f"{'bound':>6}")
    ids = REPEATING[0].tolist()
    for new in (NEW, 2 * NEW):
        tokens = model.generate(REPEATING, max_new_tokens=new, eos_token_id=[])
        plan = best_plan(ids, tokens[0, len(ids) :].tolist(), costs)
        times: list[tuple[float, float, float]] = []
        schedule = _causal.DraftLength
        for _ in range(rounds):
            row = []
            for mode in ("plain", "ours", "best"):
                extra_args = {} if mode == "plain" else {"prompt_lookup_num_tokens": LOOKUP}
                if mode == "best":
                    _causal.DraftLength = functools.partial(BestChoice, plan, probe.where)  # type: ignore[assignment,misc]
                start = time.perf_counter()
                out = model.generate(REPEATING, max_new_tokens=new, eos_token_id=[], **extra_args)
                row.append(time.perf_counter() - start)
                _causal.DraftLength = schedule  # type: ignore[misc]
                if not np.array_equal(out, tokens):
                    raise AssertionError(f"{mode} decoding gave other tokens")
            times.append((row[0], row[1], row[2]))
        t = np.array(times)
        ours = np.median(t[:, 0] / t[:, 1])
        best = np.median(t[:, 0] / t[:, 2])
        plain = first + (new - 1) * single
        steps = -(-(new - 1) // (LOOKUP + 1))  # every draft right: steps of LOOKUP + 1 tokens
        bound = plain / (first + steps * single + (new - 1 - steps) * extra)
        m = np.median(t, axis=0) * 1e3
        print(
            f"{new:>4} {m[0]:>8.2f} {m[1]:>7.2f} {m[2]:>7.2f} {ours:>5.2f}x {best:>5.2f}x "
            f"{bound:>5.2f}x"
        )


def draft_choice(
    models: dict[str, Any], costs: tuple[float, float, float], python: dict[str, float]
) -> None:
    first, single, extra = costs
    modelled = (first, single + python["n-gram"], extra)
    print(
        f"\ndraft choice: replays of greedy decodings, a step modelled as {single * 1e6:.0f} "
        f"us + {extra * 1e6:.0f} us a draft + {python['n-gram'] * 1e6:.0f} us of Python "
        f"(plain: {python['plain'] * 1e6:.0f} us), the prompt's {first * 1e3:.2f} ms; the "
        "speed-up is a plain decoding's modelled time over each"
    )
    plain = first + (NEW - 1) * (single + python["plain"])
    print(f"{'decoding':<18} {'earliest':>8} {'latest':>7} {'best':>5}")
    for name, model in models.items():
        for label, prompt in (
            ("repetitive", REPEATING),
            ("plain", PLAIN_PROMPT),
            ("looped", LOOPED),
        ):
            new = model.generate(prompt, max_new_tokens=NEW, eos_token_id=[])[0, prompt.shape[1] :]
            ids, tokens = prompt[0].tolist(), new.tolist()
            earliest = replay(ids, tokens, Earliest(LOOKUP), modelled)
            latest = replay(ids, tokens, PromptLookup(LOOKUP), modelled)
            best = best_choice(ids, tokens, modelled)
            print(
                f"{name + ' ' + label:<18} {plain / earliest:>7.2f}x {plain / latest:>6.2f}x "
                f"{plain / best:>4.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.log_severity_level = 3  # a verification step's logits: more than declared
    probe = Probe()
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        checkpoint(root / "ckpt")
        hf.export_pretrained(root / "ckpt", root / "fused", target="onnxruntime")
        hf.export_pretrained(root / "ckpt", root / "int4", target="onnxruntime", quantize="int4")
        models = {
            name: hf.OrtModelForCausalLM.from_pretrained(root / name, session_options=options)
            for name in ("int4", "fused")
        }
        python = breakdown(models, args.rounds, probe)
        costs = step_costs(models["int4"], args.rounds)
        print(
            f"\nint4 step costs: prompt {costs[0] * 1e3:.2f} ms, one token {costs[1] * 1e6:.0f} "
            f"us, a draft adds {costs[2] * 1e6:.0f} us"
        )
        draft_choice(models, costs, python)
        ceiling(models["int4"], costs, probe, args.rounds)


if __name__ == "__main__":
    main()
