"""The cost of a structured-output mask per token: llguidance, xgrammar and outlines-core.

How the library behind ``generate(json_schema=...)`` was chosen. A byte-level BPE
tokenizer is trained here (``--vocab``, 32k by default, as Llama 2's) on text from Python's
standard library plus JSON documents; each library compiles one JSON schema (and one
regex) against it, then walks a valid document's tokens: at each token it computes the
mask of allowed tokens (a bitmask over the vocabulary) and advances by the token. Printed:
compile time (the tokenizer's setup, once a model, left out), and the mean, median and
first mask-plus-advance time per token, and whether the
library imports torch (the generation runtime must not).

    python bench/bench_structured.py [--vocab 32000] [--libraries llguidance,xgrammar,outlines-core]

Only llguidance is a project dependency (the ``structured`` extra); install the other two
to compare (xgrammar brings triton and apache-tvm-ffi). Measured here (32k vocabulary, a
shared 2-core machine; milliseconds to compile, microseconds a token)::

    library        case         torch  compile ms tokens  mean us/token  median us  first us
    llguidance     json schema  False         1.5     50          345.2       25.2    1843.9
    llguidance     regex        False         1.2      7         1461.6      105.9    9772.0
    xgrammar       json schema  True       1391.7     50          311.0       17.3     668.4
    xgrammar       regex        True          9.4      7           45.9       24.6     215.7
    outlines-core  json schema  False      1070.2     50          102.4        5.1      88.4
    outlines-core  regex        False        34.6      7           15.0        3.8      85.0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city", "zip"],
        },
    },
    "required": ["name", "age", "email", "tags", "address"],
}
DOCUMENT = {
    "name": "Ada Lovelace",
    "age": 36,
    "email": "ada@example.org",
    "tags": ["math", "engines", "poetry"],
    "address": {"city": "London", "zip": "W1"},
}
REGEX = r"\d{3}-\d{3}-\d{4}"
REGEX_TEXT = "555-123-4567"


def train_tokenizer(vocab: int, folder: pathlib.Path) -> pathlib.Path:
    """A byte-level BPE tokenizer.json of ``vocab`` tokens (plus <s>, </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    source = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = sorted(source.glob("*.py"))[:120]
    lines = [line for f in files for line in f.read_text(errors="ignore").splitlines()]
    lines += [json.dumps(DOCUMENT), json.dumps(SCHEMA)] * 50
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(lines, trainer)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path


Walk = Callable[[list[int]], list[float]]


def llguidance_walk(path: pathlib.Path, grammar: tuple[str, str]) -> tuple[float, Walk, int]:
    """Compile (seconds), the walk, and the vocabulary size for llguidance."""
    import llguidance
    import llguidance.numpy as lln

    tokenizer = llguidance.LLTokenizer(path.read_text(), eos_token=1)  # once a model
    start = time.perf_counter()
    kind, text = grammar
    spec = (
        llguidance.LLMatcher.grammar_from_json_schema(text)
        if kind == "json"
        else (llguidance.LLMatcher.grammar_from_regex(text))
    )
    matcher = llguidance.LLMatcher(tokenizer, spec)
    compiled = time.perf_counter() - start
    assert not matcher.is_error(), matcher.get_error()
    mask = lln.allocate_token_bitmask(1, tokenizer.vocab_size)

    def walk(tokens: list[int]) -> list[float]:
        times = []
        for token in tokens:
            t = time.perf_counter()
            lln.fill_next_token_bitmask(matcher, mask)
            allowed = bool((mask[0, token // 32] >> (token % 32)) & 1)
            assert allowed and matcher.consume_token(token), token
            times.append(time.perf_counter() - t)
        return times

    return compiled, walk, tokenizer.vocab_size


def xgrammar_walk(path: pathlib.Path, grammar: tuple[str, str]) -> tuple[float, Walk, int]:
    """Compile (seconds), the walk, and the vocabulary size for xgrammar."""
    import xgrammar

    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    encoded = [""] * len(vocab)
    for token, index in vocab.items():
        encoded[index] = token
    info = xgrammar.TokenizerInfo(
        encoded, xgrammar.VocabType.BYTE_LEVEL, vocab_size=len(encoded), stop_token_ids=[1]
    )
    compiler = xgrammar.GrammarCompiler(info)  # once a model
    start = time.perf_counter()
    kind, text = grammar
    compiled_grammar = (
        compiler.compile_json_schema(text) if kind == "json" else compiler.compile_regex(text)
    )
    matcher = xgrammar.GrammarMatcher(compiled_grammar)
    compiled = time.perf_counter() - start
    mask = xgrammar.allocate_token_bitmask(1, info.vocab_size)

    def walk(tokens: list[int]) -> list[float]:
        times = []
        for token in tokens:
            t = time.perf_counter()
            matcher.fill_next_token_bitmask(mask)
            allowed = bool((int(mask[0, token // 32]) >> (token % 32)) & 1)
            assert allowed and matcher.accept_token(token), token
            times.append(time.perf_counter() - t)
        return times

    return compiled, walk, info.vocab_size


def outlines_walk(path: pathlib.Path, grammar: tuple[str, str]) -> tuple[float, Walk, int]:
    """Compile (seconds), the walk, and the vocabulary size for outlines-core."""
    import outlines_core
    from tokenizers import decoders

    data = json.loads(path.read_text())
    decoder = decoders.ByteLevel()
    mapping: dict[bytes, list[int]] = {}
    for token, index in data["model"]["vocab"].items():
        if index == 1:
            continue
        text = decoder.decode([token]).encode("utf-8", errors="surrogatepass")
        mapping.setdefault(text, []).append(index)
    vocabulary = outlines_core.Vocabulary(1, mapping)  # once a model
    start = time.perf_counter()
    kind, text = grammar
    regex = outlines_core.json_schema.build_regex_from_schema(text) if kind == "json" else text
    index = outlines_core.Index(regex, vocabulary)
    guide = outlines_core.Guide(index)
    compiled = time.perf_counter() - start
    size = len(data["model"]["vocab"])
    mask = np.zeros((1, (size + 31) // 32), np.int32)

    def walk(tokens: list[int]) -> list[float]:
        times = []
        for token in tokens:
            t = time.perf_counter()
            guide.write_mask_into(mask.ctypes.data, mask.size, 4)
            allowed = bool((mask[0, token // 32] >> (token % 32)) & 1)
            assert allowed, token
            guide.advance(token, return_tokens=False)
            times.append(time.perf_counter() - t)
        return times

    return compiled, walk, size


LIBRARIES = {
    "llguidance": llguidance_walk,
    "xgrammar": xgrammar_walk,
    "outlines-core": outlines_walk,
}


def imports_torch(library: str) -> bool:
    """Whether importing ``library`` (in a fresh interpreter) imports torch."""
    module = library.replace("-", "_")
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = train_tokenizer(args.vocab, pathlib.Path(tmp))
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path))
        cases = {
            "json schema": (("json", json.dumps(SCHEMA)), json.dumps(DOCUMENT)),
            "regex": (("regex", REGEX), REGEX_TEXT),
        }
        print(f"byte-level BPE, {tokenizer.get_vocab_size()} tokens")
        print(
            f"{'library':<14} {'case':<12} {'torch':<6} {'compile ms':>10} {'tokens':>6} "
            f"{'mean us/token':>14} {'median us':>10} {'first us':>9}"
        )
        for name in args.libraries.split(","):
            if importlib.util.find_spec(name.replace("-", "_")) is None:
                print(f"{name:<14} not installed (pip install {name})")
                continue
            torch_ = imports_torch(name)
            for case, (grammar, text) in cases.items():
                tokens = tokenizer.encode(text).ids
                compiled, walk, _ = LIBRARIES[name](path, grammar)
                times = walk(tokens)
                print(
                    f"{name:<14} {case:<12} {torch_!s:<6} {compiled * 1e3:>10.1f} "
                    f"{len(tokens):>6} {statistics.mean(times) * 1e6:>14.1f} "
                    f"{statistics.median(times) * 1e6:>10.1f} {times[0] * 1e6:>9.1f}"
                )


if __name__ == "__main__":
    main()
