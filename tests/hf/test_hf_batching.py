"""Continuous batching: requests that join and leave one loop get the tokens they get alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from onnx_export import hf
from onnx_export.hf import GenerationError
from tests.hf.conftest import Exported

PROMPTS = [[1, 5, 9, 13], [2, 7], [3, 8, 12, 40, 41, 42, 43, 44], [4]]


def _alone(
    model: hf.OrtModelForCausalLM, prompt: list[int], new: int, eos: int | None
) -> list[int]:
    out = model.generate([prompt], max_new_tokens=new, eos_token_id=eos)[0, len(prompt) :]
    tokens = out.tolist()
    if eos is not None and eos in tokens:
        tokens = tokens[: tokens.index(eos) + 1]
    return tokens


def test_requests_joining_and_leaving_get_their_own_tokens(
    exported: Callable[[str], Exported],
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    batcher = model.batcher()
    news = [6, 3, 9, 12]
    first = [batcher.submit(p, max_new_tokens=n) for p, n in zip(PROMPTS[:2], news, strict=False)]
    done = {}
    late: list[int] = []
    for request in batcher.run():
        done[request.id] = request.tokens
        if not late:  # two more join once the first has left, while one is running
            late = [
                batcher.submit(p, max_new_tokens=n)
                for p, n in zip(PROMPTS[2:], news[2:], strict=True)
            ]
    assert sorted(done) == sorted(first + late)
    for rid, prompt, new in zip(first + late, PROMPTS, news, strict=True):
        assert done[rid] == _alone(model, prompt, new, None), rid
    assert batcher.steps < sum(news)  # rows shared steps


def test_an_end_token_retires_a_row_early(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    greedy = _alone(model, PROMPTS[0], 10, None)
    eos = greedy[3]
    batcher = model.batcher()
    ids = [batcher.submit(p, max_new_tokens=10, eos_token_id=eos) for p in PROMPTS]
    done = {r.id: r.tokens for r in batcher.run()}
    for rid, prompt in zip(ids, PROMPTS, strict=True):
        assert done[rid] == _alone(model, prompt, 10, eos)
    assert done[ids[0]][-1] == eos and len(done[ids[0]]) <= 4


@pytest.mark.parametrize(
    ("prompt", "new", "message"),
    [
        ([], 3, "non-empty list of token ids"),
        ([1, 500], 3, "token ids in [0, 96)"),
        ([1], 0, "max_new_tokens must be"),
    ],
    ids=["empty", "outside", "zero"],
)
def test_bad_requests_are_refused(
    exported: Callable[[str], Exported], prompt: list[int], new: int, message: str
) -> None:
    batcher = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder).batcher()
    with pytest.raises(GenerationError, match=message.replace("[", r"\[").replace(")", r"\)")):
        batcher.submit(prompt, max_new_tokens=new)
