"""``onnx-export serve FOLDER --openai`` on the fused ``target="onnxruntime"`` decoder.

The tiny Llama of ``openai_folder.py`` (head size 16, from which ORT rotates inside
GroupQueryAttention) exported with ``target="onnxruntime"``, in float32, int4 and int8, served by
a real subprocess and called with the official ``openai`` client: the rows of the shared
loop live in slots of the decoder's shared cache, and each answer must be the runtime's own
greedy text, alone or among concurrent streams (8 clients, 4 slots: rows wait, join
together, leave and have their slots taken).
"""

from __future__ import annotations

import concurrent.futures
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from onnx_export import hf
from tests.serving import openai_folder
from tests.serving.openai_server import (
    PROMPTS,
    Server,
    assert_prefilled_together_alone,
    client,
    running,
)

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

NAME = "tiny-llama"


@pytest.fixture(scope="module", params=[None, "int4", "int8"], ids=["fp32", "int4", "int8"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    export: dict[str, Any] = {"target": "onnxruntime"}
    if request.param is not None:
        export["quantize"] = request.param
    root = tmp_path_factory.mktemp("fused")
    return openai_folder.build(root, export, hidden_size=64, max_position_embeddings=1024)


@pytest.fixture(scope="module")
def model(folder: pathlib.Path) -> hf.OrtModelForCausalLM:
    return hf.OrtModelForCausalLM.from_pretrained(folder)


@pytest.fixture(scope="module")
def server(folder: pathlib.Path) -> Iterator[Server]:
    with running(folder, "--max-batch-size", "4", "--max-waiting", "16") as started:
        yield started


def test_the_folder_is_the_fused_decoder(model: hf.OrtModelForCausalLM) -> None:
    assert model.session.shares_buffer  # rows go to slots of one shared cache


@pytest.mark.parametrize("prompt", PROMPTS[:2], ids=["plain", "story"])
def test_completion_gives_the_runtime_greedy_text(
    server: Server, model: hf.OrtModelForCausalLM, prompt: str
) -> None:
    answer = client(server).completions.create(
        model=NAME, prompt=prompt, max_tokens=12, temperature=0
    )
    alone = model.generate_text(prompt, max_new_tokens=12, temperature=None)
    assert answer.choices[0].text == alone


def test_eight_concurrent_streams_each_get_their_alone_text(
    server: Server, model: hf.OrtModelForCausalLM
) -> None:
    api = client(server)

    def stream(prompt: str) -> str:
        chunks = api.completions.create(
            model=NAME, prompt=prompt, max_tokens=20, temperature=0, stream=True
        )
        return "".join(c.choices[0].text for c in chunks if c.choices)

    alone = [stream(p) for p in PROMPTS]
    assert alone == [model.generate_text(p, max_new_tokens=20, temperature=None) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(stream, PROMPTS))
    assert together == alone


def test_requests_prefilled_together_get_their_alone_tokens(
    model: hf.OrtModelForCausalLM,
) -> None:
    """Prompts of several lengths join in one right-padded prefill; one ends at once."""
    assert_prefilled_together_alone(model)
