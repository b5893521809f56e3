"""Text in, text out: a tokenizer trained here with the ``tokenizers`` library sits beside
the exported model; generate_text (and ``onnx-export generate``) give transformers' text,
chat templates render as transformers renders them, stop strings stop where its do."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from onnx_export import hf
from tests.hf.conftest import Exported
from tests.hf.torch_free import Call, run_without_torch

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da")
# "abcdef" is the prefix transformers' stop strings tokenize to read each token's text
_WORDS = [*[a + b for a in _SYLLABLES for b in _SYLLABLES][:88], "abcdef", "user", "assistant"]
_WORDS.append("says")
_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} says {{ m['content'] | trim }} "
    "{% endfor %}{% if add_generation_prompt %}assistant says{% endif %}"
)


def _tokenizer_files(folder: pathlib.Path) -> None:
    """Train a WordLevel tokenizer of exactly the model's 96 ids; write its files."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    trainer = trainers.WordLevelTrainer(vocab_size=96, special_tokens=specials)
    sentences = [" ".join(_WORDS[i : i + 7]) for i in range(0, len(_WORDS), 3)]
    tokenizer.train_from_iterator(sentences, trainer)
    assert tokenizer.get_vocab_size() == 96
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "chat_template": _TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def with_text(
    exported: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Exported, pathlib.Path, Any]:
    """The exported llama folder, copied, with a tokenizer; and transformers' tokenizer."""
    import transformers

    case = exported("llama")
    folder = tmp_path_factory.mktemp("text") / "onnx"
    shutil.copytree(case.folder, folder)
    _tokenizer_files(folder)
    return case, folder, transformers.AutoTokenizer.from_pretrained(folder)


def _theirs(case: Exported, tok: Any, texts: list[str], **kwargs: Any) -> list[str]:
    batch = tok(texts, return_tensors="pt", padding=True, padding_side="left")
    with torch.no_grad():
        out = case.model.generate(**batch, do_sample=False, pad_token_id=0, **kwargs)
    width = batch["input_ids"].shape[1]
    return [tok.decode(row[width:], skip_special_tokens=True) for row in out]


PROMPTS = ["kaka kalo kami", "lone losu lota lori lopo"]


@pytest.mark.parametrize("mode", [{}, {"num_beams": 3}, {"repetition_penalty": 1.5}])
def test_text_in_text_out_like_transformers(
    with_text: tuple[Exported, pathlib.Path, Any], mode: dict[str, Any]
) -> None:
    case, folder, tok = with_text
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    one = model.generate_text(PROMPTS[0], max_new_tokens=8, **mode)
    assert one == _theirs(case, tok, PROMPTS[:1], max_new_tokens=8, **mode)[0]
    assert model.generate(PROMPTS[0], max_new_tokens=8, **mode) == one
    both = model.generate_text(PROMPTS, max_new_tokens=8, **mode)
    assert both == _theirs(case, tok, PROMPTS, max_new_tokens=8, **mode)
    assert all(len(t.split()) == 8 for t in both)


def test_chat_template_renders_like_transformers(
    with_text: tuple[Exported, pathlib.Path, Any],
) -> None:
    case, folder, tok = with_text
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    messages = [{"role": "user", "content": " kaka kalo "}, {"role": "assistant", "content": "mi"}]
    messages.append({"role": "user", "content": "lone"})
    rendered = model.tokenizer.render_chat(messages)
    assert rendered == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    ids = torch.tensor([ids["input_ids"]])
    with torch.no_grad():
        out = case.model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    expected = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert model.generate_text(messages, max_new_tokens=6) == expected


@pytest.mark.parametrize("batch", [1, 2])
def test_stop_strings_stop_where_transformers_stops(
    with_text: tuple[Exported, pathlib.Path, Any], batch: int
) -> None:
    case, folder, tok = with_text
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    full = model.generate_text(PROMPTS[0], max_new_tokens=10)
    assert isinstance(full, str)
    word = full.split()[3]
    for stop in (word, word[1:] + " ", word[:-1]):  # a whole token, overhangs both ends
        kwargs = {"max_new_tokens": 10, "stop_strings": [stop]}
        ours = model.generate_text(PROMPTS[:batch], **kwargs)
        theirs = _theirs(case, tok, PROMPTS[:batch], tokenizer=tok, **kwargs)
        assert ours == theirs, stop
    stopped = model.generate_text(PROMPTS[0], max_new_tokens=10, stop_strings=word)
    assert isinstance(stopped, str) and len(stopped.split()) < 10


def test_text_without_torch_and_from_the_command_line(
    with_text: tuple[Exported, pathlib.Path, Any],
) -> None:
    from onnx_export.cli import main

    _, folder, _ = with_text
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    expected = model.generate_text(PROMPTS[1], max_new_tokens=7, num_beams=2)
    call = Call("text", "generate_text", {}, {"prompt": PROMPTS[1], "max_new_tokens": 7})
    call.kwargs["num_beams"] = 2
    got = run_without_torch(folder, [call])
    assert str(got["text"]) == expected
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            ["generate", str(folder), PROMPTS[1], "--max-new-tokens", "7", "--num-beams", "2"]
        )
    assert code == 0 and out.getvalue() == expected + "\n"


def test_text_needs_a_tokenizer(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    with pytest.raises(hf.GenerationError, match=r"tokenizer\.json' is missing"):
        model.generate("hello", max_new_tokens=2)
    with pytest.raises(hf.GenerationError, match="tokenizer"):
        model.generate(np.array([[3, 4]]), max_new_tokens=2, stop_strings=["x"])
