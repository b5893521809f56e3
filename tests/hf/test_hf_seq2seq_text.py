"""Text in, text out for encoder-decoders (T5): ``OrtModelForSeq2SeqLM.generate_text``,
``generate("text")`` and ``onnx-export generate`` give transformers' text; options only
decoder-only models have, and folders that take no text, are refused at once (exit 2)."""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import torch

from onnx_export import hf
from onnx_export.cli import main
from tests.hf.conftest import Exported
from tests.hf.test_hf_generate_text import _tokenizer_files

pytest.importorskip("tokenizers")

TEXTS = ["kaka kalo kami", "lone losu lota lori lopo"]


@pytest.fixture(scope="module")
def t5_text(
    exported: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Exported, pathlib.Path, Any]:
    """The exported T5 folder, copied, with a 96-id tokenizer; and transformers' tokenizer."""
    import transformers

    case = exported("t5")
    folder = tmp_path_factory.mktemp("t5_text") / "onnx"
    shutil.copytree(case.folder, folder)
    _tokenizer_files(folder)
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",'
        ' "pad_token": "<pad>", "unk_token": "<unk>"}'
    )
    return case, folder, transformers.AutoTokenizer.from_pretrained(folder)


def _theirs(case: Exported, tok: Any, texts: list[str]) -> list[str]:
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = case.model.generate(**batch, do_sample=False, max_new_tokens=6)
    return [tok.decode(row, skip_special_tokens=True) for row in out]


def test_generate_text_gives_transformers_text(t5_text: tuple[Exported, pathlib.Path, Any]) -> None:
    case, folder, tok = t5_text
    model = hf.OrtModelForSeq2SeqLM.from_pretrained(folder)
    one = model.generate_text(TEXTS[0], max_new_tokens=6)
    assert one == _theirs(case, tok, TEXTS[:1])[0] and one
    assert model.generate(TEXTS[0], max_new_tokens=6) == one  # text in, text out
    assert model.generate_text(TEXTS, max_new_tokens=6) == _theirs(case, tok, TEXTS)


def test_the_cli_generates_with_a_t5_folder(
    t5_text: tuple[Exported, pathlib.Path, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    case, folder, tok = t5_text
    assert main(["generate", str(folder), TEXTS[1], "--max-new-tokens", "6"]) == 0
    assert capfd.readouterr().out == _theirs(case, tok, TEXTS[1:])[0] + "\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--num-beams", "2"], "--num-beams: not for an encoder-decoder"),
        (["--chat"], "--chat: not for an encoder-decoder"),
    ],
)
def test_decoder_only_options_are_refused_for_t5(
    t5_text: tuple[Exported, pathlib.Path, Any],
    extra: list[str],
    message: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    _, folder, _ = t5_text
    assert main(["generate", str(folder), TEXTS[0], *extra]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_folder_without_text_is_refused_at_once(
    exported: Callable[[str], Exported], capfd: pytest.CaptureFixture[str]
) -> None:
    folder = exported("t5").folder  # no tokenizer.json beside it
    capfd.readouterr()
    assert main(["generate", str(folder), "hello"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "tokenizer.json" in err, err


def test_chat_without_a_chat_template_is_a_usage_error(
    exported: Callable[[str], Exported],
    tmp_path: pathlib.Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    folder = tmp_path / "onnx"
    shutil.copytree(exported("llama").folder, folder)
    _tokenizer_files(folder)
    (folder / "tokenizer_config.json").write_text('{"bos_token": "<s>", "eos_token": "</s>"}')
    capfd.readouterr()  # the export's progress bars
    assert main(["generate", str(folder), "kaka", "--chat", "--max-new-tokens", "2"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "has no chat template" in err, err
    assert main(["generate", str(folder), "kaka", "--max-new-tokens", "2"]) == 0
