"""The server's loop admits a burst of requests at one step, up to a prompt-token budget.

The tiny Llama of ``openai_folder.py`` on the default graph and the fused one, run by the
server's :class:`Engine` in-process (its own loop thread, no HTTP): a burst joins the batch
at its first step when its prompts fit ``PREFILL_TOKENS``, over several steps when they do
not, and every row gets the runtime's greedy tokens alone either way.
"""

from __future__ import annotations

import pathlib
import threading
from typing import Any

import pytest

from onnx_export import hf
from onnx_export.serving.openai import _engine
from onnx_export.serving.openai._engine import Choices, Engine, Event
from tests.serving import openai_folder, openai_server

PROMPTS = [
    *openai_server.PROMPTS,
    "little hello",
    "time there",
    "model said",
    "world",
]
NEW = 5


@pytest.fixture(scope="module", params=["onnx", "onnxruntime"], ids=["default", "fused"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp(request.param)
    export = {"target": request.param}
    folder = openai_folder.build(root, export, hidden_size=64, max_position_embeddings=1024)
    return hf.OrtModelForCausalLM.from_pretrained(pathlib.Path(folder))


def _burst(model: hf.OrtModelForCausalLM) -> tuple[dict[int, list[int]], int, list[list[int]]]:
    """All PROMPTS queued before the loop starts: each ticket's tokens, the steps run."""
    engine = Engine(model, max_batch=16, max_waiting=16)
    prompts = [model.tokenizer.encode([p])[0] for p in PROMPTS]
    tokens: dict[int, list[int]] = {}
    finish = engine._finish

    def recorded(row: Any, reason: str, text: str | None = None) -> None:
        tokens[row.ticket] = list(row.tokens)
        finish(row, reason, text)

    engine._finish = recorded  # type: ignore[method-assign]
    ended = threading.Semaphore(0)

    def sink(event: Event) -> None:
        assert event.error is None, event.error
        if event.finish_reason is not None:
            ended.release()

    for prompt in prompts:
        engine.submit(Choices((tuple(prompt),), NEW, ignore_eos=True), sink)
    engine.start()
    for _ in prompts:
        assert ended.acquire(timeout=600)
    engine.close(60)
    return tokens, engine.stats["steps"], prompts


def _alone(model: hf.OrtModelForCausalLM, prompt: list[int]) -> list[int]:
    return model.generate([prompt], max_new_tokens=NEW, eos_token_id=[])[0, len(prompt) :].tolist()


def test_a_burst_joins_at_the_first_step_and_gets_its_alone_tokens(
    model: hf.OrtModelForCausalLM,
) -> None:
    tokens, steps, prompts = _burst(model)
    assert steps == NEW - 1  # the prefill gives each row its first token; all decode together
    for ticket, prompt in enumerate(prompts):  # tickets count from 0 in submission order
        assert tokens[ticket] == _alone(model, prompt), ticket


def test_past_the_budget_a_burst_joins_over_several_steps(
    model: hf.OrtModelForCausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_engine, "PREFILL_TOKENS", 12)  # a few short prompts a step
    tokens, steps, prompts = _burst(model)
    assert steps > NEW - 1
    for ticket, prompt in enumerate(prompts):
        assert tokens[ticket] == _alone(model, prompt), ticket
