"""Speculative decoding: drafts verified k at a time give plain greedy's tokens.

``prompt_lookup_num_tokens=`` and ``assistant_model=`` (transformers' names) against
transformers' ``generate()`` with the same arguments, and against our plain greedy; a
draft model that is the model itself has every draft kept (k + 1 tokens a step).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from onnx_export import hf
from onnx_export.hf import GenerationError
from onnx_export.hf.runtime.generation._generate import Stopping
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._speculative import (
    ChunkRunner,
    DraftModel,
    PromptLookup,
    speculative_decode,
)
from tests.hf.checkpoints import CASES
from tests.hf.conftest import Exported
from tests.hf.torch_free import Call, run_without_torch

#: A prompt that repeats itself, as a summary that quotes its source.
REPEATING = [[1, 5, 9, 13, 17, 21, 5, 9, 13, 17, 21, 5, 9]]


def _theirs(case: Exported, prompt: list[list[int]], **kwargs: Any) -> np.ndarray:
    with torch.no_grad():
        out = case.model.generate(torch.tensor(prompt), do_sample=False, pad_token_id=0, **kwargs)
    return out.numpy()


@pytest.mark.parametrize(
    "settings",
    [{}, {"repetition_penalty": 1.3}, {"no_repeat_ngram_size": 3}],
    ids=["greedy", "repetition-penalty", "no-repeat-ngram"],
)
@pytest.mark.parametrize("k", [1, 4])
def test_prompt_lookup_gives_plain_greedy_and_transformers_tokens(
    exported: Callable[[str], Exported], settings: dict[str, Any], k: int
) -> None:
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ours = model.generate(REPEATING, max_new_tokens=20, prompt_lookup_num_tokens=k, **settings)
    plain = model.generate(REPEATING, max_new_tokens=20, **settings)
    np.testing.assert_array_equal(ours, plain)
    theirs = _theirs(case, REPEATING, max_new_tokens=20, prompt_lookup_num_tokens=k, **settings)
    np.testing.assert_array_equal(ours, theirs)


def test_an_eos_token_stops_where_plain_greedy_stops(exported: Callable[[str], Exported]) -> None:
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    plain = model.generate(REPEATING, max_new_tokens=20)
    eos = int(plain[0, len(REPEATING[0]) + 5])  # a token greedy decoding makes
    ours = model.generate(
        REPEATING, max_new_tokens=20, eos_token_id=eos, prompt_lookup_num_tokens=4
    )
    np.testing.assert_array_equal(
        ours, model.generate(REPEATING, max_new_tokens=20, eos_token_id=eos)
    )
    assert ours[0, -1] == eos and ours.shape[1] < plain.shape[1]


@pytest.fixture(scope="module")
def assistant(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """Another Llama of the same vocabulary (other weights), exported: the draft model."""
    root = tmp_path_factory.mktemp("assistant")
    model = CASES["llama"].save(root / "checkpoint", seed=7)
    result = hf.export_pretrained(root / "checkpoint", root / "onnx")
    return Exported("assistant", model, root / "checkpoint", root / "onnx", result)


def test_a_draft_model_gives_plain_greedy_and_transformers_tokens(
    exported: Callable[[str], Exported], assistant: Exported
) -> None:
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    small = hf.OrtModelForCausalLM.from_pretrained(assistant.folder)
    ours = model.generate(REPEATING, max_new_tokens=24, assistant_model=small)
    np.testing.assert_array_equal(ours, model.generate(REPEATING, max_new_tokens=24))
    theirs = _theirs(case, REPEATING, max_new_tokens=24, assistant_model=assistant.model)
    np.testing.assert_array_equal(ours, theirs)


def test_the_model_as_its_own_draft_keeps_every_draft(exported: Callable[[str], Exported]) -> None:
    """k + 1 tokens a model step: the drafts are verified in one chunk with the past."""
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    drafter = DraftModel(model.session, uses_positions=True, num_tokens=4)
    runner = ChunkRunner(model.session, uses_positions=True)
    stopping = Stopping.resolve(30, None, None)
    ids = np.array(REPEATING)
    tokens, stats = speculative_decode(runner, drafter, ids, TokenChooser(), stopping)
    np.testing.assert_array_equal(tokens, model.generate(ids, max_new_tokens=30))
    assert stats.acceptance == 1.0
    # drafts of 4, 6, 8, 10 (+2 each time all are kept), one token more each step
    assert stats.steps == 4 and stats.accepted == 26


def test_prompt_lookup_counts_what_it_keeps(exported: Callable[[str], Exported]) -> None:
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    runner = ChunkRunner(model.session, uses_positions=True)
    ids = np.array(REPEATING)
    tokens, stats = speculative_decode(
        runner, PromptLookup(5), ids, TokenChooser(), Stopping.resolve(20, None, None)
    )
    np.testing.assert_array_equal(tokens, model.generate(ids, max_new_tokens=20))
    assert stats.steps + stats.accepted == 20 and stats.accepted <= stats.proposed


def test_runs_without_torch(exported: Callable[[str], Exported]) -> None:
    case = exported("llama")
    calls = [
        Call(
            "lookup",
            "generate",
            {"input_ids": np.array(REPEATING)},
            {"max_new_tokens": 12, "prompt_lookup_num_tokens": 3},
        ),
        Call("plain", "generate", {"input_ids": np.array(REPEATING)}, {"max_new_tokens": 12}),
    ]
    results = run_without_torch(case.folder, calls)
    np.testing.assert_array_equal(results["lookup"], results["plain"])


@pytest.mark.parametrize(
    ("prompt", "kwargs", "message"),
    [
        (REPEATING * 2, {"prompt_lookup_num_tokens": 3}, "one unpadded prompt"),
        (REPEATING, {"prompt_lookup_num_tokens": 3, "do_sample": True}, "drop do_sample"),
        (REPEATING, {"prompt_lookup_num_tokens": 3, "num_beams": 2}, "drop num_beams"),
        (REPEATING, {"prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens must be"),
        (REPEATING, {"assistant_model": "small"}, "must be an OrtModelForCausalLM"),
    ],
    ids=["batch", "sampling", "beams", "zero", "not-a-model"],
)
def test_what_speculation_cannot_do_is_said(
    exported: Callable[[str], Exported], prompt: Any, kwargs: dict[str, Any], message: str
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    with pytest.raises(GenerationError, match=re.escape(message)):
        model.generate(prompt, max_new_tokens=5, **kwargs)


def test_a_draft_of_another_vocabulary_is_refused(
    exported: Callable[[str], Exported], tmp_path: pathlib.Path
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    other = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    other.folder.config["vocab_size"] = 200  # as a draft of another tokenizer would have
    with pytest.raises(GenerationError, match="must share the tokenizer"):
        model.generate(REPEATING, max_new_tokens=5, assistant_model=other)
