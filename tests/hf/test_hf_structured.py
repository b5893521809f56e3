"""Structured output: json_schema=, regex= and grammar= on generate(), torch-free.

A byte-level BPE tokenizer (320 tokens) is trained here on JSON text and sits beside a
tiny random Llama of that vocabulary. Every constrained output parses and validates; the
greedy tokens equal transformers' ``generate()`` with the same llguidance mask as a
``LogitsProcessor`` (so the mask is applied where transformers applies its processors).
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import re
from typing import Any

import numpy as np
import pytest
import torch
import transformers as tf

from onnx_export import hf
from onnx_export.hf import GenerationError
from tests.hf.torch_free import Call, run_without_torch

llguidance = pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("tokenizers")

VOCAB = 320
EOS = 2

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "admin": {"type": "boolean"},
        "role": {"enum": ["reader", "writer", "owner"]},
    },
    "required": ["name", "admin", "role"],
    "additionalProperties": False,
}
SCORES = {"type": "array", "items": {"enum": [1, 22, 333]}, "minItems": 1, "maxItems": 4}
PHONE = r"[0-9]{3}-[0-9]{4}"
LARK = 'start: "(" item (" " item)* ")"\nitem: "ka" | "lo" | "mi"'


def _train_tokenizer(folder: pathlib.Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    samples = [
        json.dumps({"name": "ada", "admin": True, "role": "owner"}),
        json.dumps([1, 22, 333, 22]),
        "555-1234 (ka lo mi) reader writer false null",
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
    assert tokenizer.get_vocab_size() <= VOCAB
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def json_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, pathlib.Path, Any]:
    """The eager Llama, its exported folder (tokenizer beside it), transformers' tokenizer."""
    root = tmp_path_factory.mktemp("structured")
    config = tf.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=0,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    model.save_pretrained(root / "checkpoint")
    _train_tokenizer(root / "checkpoint")
    hf.export_pretrained(root / "checkpoint", root / "onnx")
    tokenizer = tf.AutoTokenizer.from_pretrained(root / "checkpoint")
    return model, root / "onnx", tokenizer


class _LLGuidanceMask(tf.LogitsProcessor):
    """transformers' side: the same llguidance grammar as a logits processor."""

    def __init__(self, folder: pathlib.Path, grammar: str, prompt: int) -> None:
        text = (folder / "tokenizer.json").read_text()
        tokenizer = llguidance.LLTokenizer(text, n_vocab=VOCAB, eos_token=[EOS])
        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        self.prompt = prompt

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] > self.prompt:
            assert self.matcher.consume_token(int(input_ids[0, -1]))
        bits = np.frombuffer(self.matcher.compute_bitmask(), np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: scores.shape[-1]].astype(bool)
        scores[:, torch.from_numpy(~allowed)] = -torch.inf
        return scores


def _grammar(kind: str, value: Any) -> str:
    matcher = llguidance.LLMatcher
    if kind == "json_schema":
        return str(matcher.grammar_from_json_schema(value, defaults={"whitespace_flexible": False}))
    if kind == "regex":
        return str(matcher.grammar_from_regex(value))
    return str(matcher.grammar_from_lark(value))


def _valid(kind: str, value: Any, text: str) -> None:
    if kind == "json_schema":
        jsonschema.validate(json.loads(text), value)
    elif kind == "regex":
        assert re.fullmatch(value, text), text
    else:
        assert re.fullmatch(r"\((ka|lo|mi)( (ka|lo|mi))*\)", text), text


CASES = {
    "object": ("json_schema", PERSON),
    "array": ("json_schema", SCORES),
    "regex": ("regex", PHONE),
    "lark": ("grammar", LARK),
}
PROMPT = [[1, 40, 41, 42]]


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_constrained_greedy_is_transformers_with_the_same_mask(
    json_model: tuple[Any, pathlib.Path, Any], case: str
) -> None:
    eager, folder, tokenizer = json_model
    kind, value = CASES[case]
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    ours = model.generate(PROMPT, max_new_tokens=60, **{kind: value})
    text = tokenizer.decode(ours[0, len(PROMPT[0]) :], skip_special_tokens=True)
    _valid(kind, value, text)
    assert ours[0, -1] == EOS  # the row ended because the output was complete
    mask = _LLGuidanceMask(folder, _grammar(kind, value), len(PROMPT[0]))
    with torch.no_grad():
        theirs = eager.generate(
            torch.tensor(PROMPT),
            max_new_tokens=60,
            do_sample=False,
            logits_processor=tf.LogitsProcessorList([mask]),
        )
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_sampled_rows_each_validate_without_torch(
    json_model: tuple[Any, pathlib.Path, Any],
) -> None:
    _, folder, tokenizer = json_model
    calls = [
        Call(
            f"seed{seed}",
            "generate",
            {"input_ids": np.array(PROMPT * 3)},
            {
                "max_new_tokens": 60,
                "json_schema": PERSON,
                "do_sample": True,
                "top_k": 20,
                "seed": seed,
            },
        )
        for seed in range(2)
    ]
    results = run_without_torch(folder, calls)
    texts = set()
    for rows in results.values():
        for row in rows:
            text = tokenizer.decode(row[len(PROMPT[0]) :], skip_special_tokens=True)
            jsonschema.validate(json.loads(text), PERSON)
            texts.add(text)
    assert len(texts) > 1  # sampling drew different documents


def test_generate_text_returns_a_document_that_parses(
    json_model: tuple[Any, pathlib.Path, Any],
) -> None:
    _, folder, _ = json_model
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    text = model.generate_text("person:", max_new_tokens=60, json_schema=json.dumps(SCORES))
    assert isinstance(text, str)
    jsonschema.validate(json.loads(text), SCORES)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"json_schema": PERSON, "regex": PHONE}, "one of json_schema=, regex= and grammar="),
        ({"json_schema": "{not json"}, "not valid JSON text"),
        ({"json_schema": [1, 2]}, "must be a JSON schema"),
        ({"regex": "[0-9"}, "regex= cannot be compiled"),
        ({"grammar": "start: nothing_defined"}, "grammar= cannot be compiled"),
        ({"json_schema": PERSON, "num_beams": 2}, "not with num_beams > 1"),
        ({"json_schema": PERSON, "max_new_tokens": 3}, "before matching the json schema"),
    ],
    ids=["two", "bad-json", "not-a-dict", "bad-regex", "bad-grammar", "beams", "too-short"],
)
def test_bad_constraints_say_what_to_do(
    json_model: tuple[Any, pathlib.Path, Any], kwargs: dict[str, Any], message: str
) -> None:
    _, folder, _ = json_model
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    kwargs = {"max_new_tokens": 40, **kwargs}
    with pytest.raises(GenerationError, match=re.escape(message)):
        model.generate(PROMPT, **kwargs)


def _cli(args: list[str]) -> tuple[int, str, str]:
    from onnx_export.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def test_the_command_line_prints_a_valid_document(
    json_model: tuple[Any, pathlib.Path, Any], tmp_path: pathlib.Path
) -> None:
    _, folder, _ = json_model
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(PERSON))
    for given in (str(schema), json.dumps(PERSON)):
        code, out, _ = _cli(
            ["generate", str(folder), "who:", "--max-new-tokens", "60", "--json-schema", given]
        )
        assert code == 0
        jsonschema.validate(json.loads(out), PERSON)
    code, out, _ = _cli(
        ["generate", str(folder), "call:", "--max-new-tokens", "20", "--regex", PHONE]
    )
    assert code == 0 and re.fullmatch(PHONE, out.strip())


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--json-schema", "missing.json"], 2, "cannot be read"),
        (["--json-schema", '{"type": "object"', "--max-new-tokens", "5"], 1, "not valid JSON"),
        (["--json-schema", json.dumps(PERSON), "--max-new-tokens", "3"], 1, "max_new_tokens"),
    ],
    ids=["no-file", "bad-json", "too-short"],
)
def test_the_command_line_says_what_went_wrong(
    json_model: tuple[Any, pathlib.Path, Any], args: list[str], code: int, message: str
) -> None:
    _, folder, _ = json_model
    got, out, err = _cli(["generate", str(folder), "who:", *args])
    assert got == code and out == ""
    assert err.count("\n") == 1 and "error: " in err and message in err


def test_stream_yields_the_constrained_tokens(json_model: tuple[Any, pathlib.Path, Any]) -> None:
    _, folder, _ = json_model
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    steps = [int(t[0]) for t in model.stream(PROMPT, max_new_tokens=60, regex=PHONE)]
    whole = model.generate(PROMPT, max_new_tokens=60, regex=PHONE)[0, len(PROMPT[0]) :]
    assert steps == whole.tolist()
