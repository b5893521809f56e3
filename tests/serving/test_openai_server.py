"""``onnx-export serve FOLDER --openai``: a real server on loopback, called with the official
``openai`` client.

A tiny random Llama (``openai_folder.py``: a BPE tokenizer trained here, a chat template)
is exported once for the module and served by a subprocess that cannot import torch.
Greedy answers are compared with the runtime's own ``generate()`` on the same folder (which
``tests/hf`` compares with transformers); concurrent clients must each get the tokens they
get alone, since every request shares one continuous-batching loop.
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import signal
import threading
import time
import urllib.error
import urllib.request
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
    health,
    running,
    start,
)

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

NAME = "tiny-llama"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "admin": {"type": "boolean"},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "admin", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return openai_folder.build(tmp_path_factory.mktemp("openai"), max_position_embeddings=1024)


@pytest.fixture(scope="module")
def model(folder: pathlib.Path) -> hf.OrtModelForCausalLM:
    return hf.OrtModelForCausalLM.from_pretrained(folder)


@pytest.fixture(scope="module")
def server(folder: pathlib.Path) -> Iterator[Server]:
    with running(folder, "--max-batch-size", "16", "--max-waiting", "64") as started:
        yield started


def _greedy(model: hf.OrtModelForCausalLM, prompt: str, new: int) -> str:
    return str(model.generate_text(prompt, max_new_tokens=new, temperature=None))


def test_models_lists_the_served_folder(server: Server) -> None:
    listed = client(server).models.list()
    assert [m.id for m in listed.data] == [NAME]
    assert client(server).models.retrieve(NAME).id == NAME


@pytest.mark.parametrize("prompt", PROMPTS[:3], ids=["plain", "story", "json"])
def test_completion_gives_the_runtime_greedy_text(
    server: Server, model: hf.OrtModelForCausalLM, prompt: str
) -> None:
    answer = client(server).completions.create(
        model=NAME, prompt=prompt, max_tokens=12, temperature=0
    )
    assert answer.choices[0].text == _greedy(model, prompt, 12)
    assert answer.choices[0].finish_reason in ("length", "stop")
    assert answer.usage.prompt_tokens == len(model.tokenizer.encode([prompt])[0])


def test_chat_streams_the_same_answer_as_a_whole_reply(
    server: Server, model: hf.OrtModelForCausalLM
) -> None:
    messages = [{"role": "user", "content": "hello there, how are you?"}]
    api = client(server)
    whole = api.chat.completions.create(model=NAME, messages=messages, max_tokens=16, temperature=0)
    chunks = list(
        api.chat.completions.create(
            model=NAME,
            messages=messages,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == whole.choices[0].finish_reason and not any(reasons[:-1])
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert text == _greedy(model, messages, 16)  # the folder's chat template


def test_tools_are_given_to_the_chat_template(
    server: Server, model: hf.OrtModelForCausalLM
) -> None:
    messages = [{"role": "user", "content": "weather?"}]
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {}}}]
    answer = client(server).chat.completions.create(
        model=NAME, messages=messages, tools=tools, max_tokens=2, temperature=0
    )
    rendered = model.tokenizer.render_chat(messages, tools=tools)
    assert "tools: weather" in rendered
    expected = model.tokenizer.encode([rendered], add_special_tokens=False)[0]
    assert answer.usage.prompt_tokens == len(expected)


def test_an_image_to_a_text_model_is_a_400_saying_it_takes_none(server: Server) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what?"}, image]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(model=NAME, messages=messages, max_tokens=2)
    assert caught.value.body["param"] == "messages[0].content[1].image_url"
    assert "takes no images" in caught.value.body["message"]


def test_json_schema_output_parses_and_validates(server: Server) -> None:
    format_ = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    answer = client(server).chat.completions.create(
        model=NAME,
        messages=[{"role": "user", "content": "who?"}],
        max_tokens=60,
        temperature=0,
        response_format=format_,
    )
    assert answer.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answer.choices[0].message.content), PERSON)


def test_stop_text_ends_the_choice_before_it(server: Server, model: hf.OrtModelForCausalLM) -> None:
    full = _greedy(model, PROMPTS[1], 20)
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    answer = client(server).completions.create(
        model=NAME, prompt=PROMPTS[1], max_tokens=20, temperature=0, stop=[stop]
    )
    assert answer.choices[0].text == full[: full.index(stop)]
    assert answer.choices[0].finish_reason == "stop"


def test_seeded_sampling_repeats_and_n_gives_choices(server: Server) -> None:
    def ask() -> list[str]:
        answer = client(server).completions.create(
            model=NAME, prompt="hello", max_tokens=10, temperature=1.0, top_p=0.9, seed=7, n=3
        )
        assert [c.index for c in answer.choices] == [0, 1, 2]
        return [c.text for c in answer.choices]

    first = ask()
    assert ask() == first
    assert len(set(first)) > 1  # each choice samples with its own seed


def test_sixteen_concurrent_clients_each_get_their_own_tokens(server: Server) -> None:
    prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(16)]
    api = client(server)

    def stream(prompt: str) -> str:
        chunks = api.completions.create(
            model=NAME, prompt=prompt, max_tokens=24, temperature=0, stream=True
        )
        return "".join(c.choices[0].text for c in chunks if c.choices)

    alone = [stream(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(stream, prompts))
    assert together == alone
    assert health(server)["active"] == 0


def test_a_client_that_leaves_mid_stream_frees_its_slot(server: Server) -> None:
    before = health(server)["cancelled"]
    chunks = client(server).completions.create(
        model=NAME,
        prompt="hello",
        max_tokens=1000,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    for count, _ in enumerate(chunks):
        if count == 3:
            break
    chunks.close()
    deadline = time.monotonic() + 30
    while (load := health(server))["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert load["active"] == 0 and load["cancelled"] == before + 1, load


def test_a_client_that_gives_up_waiting_frees_its_slot(server: Server) -> None:
    before = health(server)["cancelled"]
    # 16 choices of 1,000 tokens take seconds even on a fast idle machine (one choice took
    # 0.6 s on a 2-core VM, close enough to a 0.5 s timeout to race): the client gives up
    # long before the answer could be ready.
    impatient = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=0.25)
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(
            model=NAME, prompt="hello", max_tokens=1000, n=16, extra_body={"ignore_eos": True}
        )
    deadline = time.monotonic() + 30
    while (load := health(server))["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
    # Every row in the batch is cancelled; rows still queued leave without counting.
    assert load["active"] == 0 and before < load["cancelled"] <= before + 16, load
    answer = client(server).completions.create(
        model=NAME, prompt="hello", max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 3


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", -1),
        ("temperature", 3),
        ("n", 0),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("top_p", "high"),
        ("response_format", {"type": "xml"}),
        ("max_tokens", 5000),  # past the model's 1024 positions
    ],
    ids=str,
)
def test_a_bad_field_is_answered_400_naming_it(server: Server, field: str, value: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        given = {"max_tokens": 4, field: value}
        extra = (
            {"response_format": given.pop("response_format")} if field == "response_format" else {}
        )
        client(server).completions.create(model=NAME, prompt="hello", extra_body=extra, **given)
    error = caught.value.body
    assert error["param"] == field and error["type"] == "invalid_request_error", error
    assert error["message"] and "Traceback" not in error["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"model": "tiny-llama"}',
        b'{"model": "tiny-llama", "messages": 3}',
    ],
    ids=["not-json", "not-an-object", "no-messages", "messages-not-a-list"],
)
def test_a_malformed_body_is_answered_400_with_openai_error(server: Server, body: bytes) -> None:
    request = urllib.request.Request(
        server.url + "/chat/completions", body, {"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 400
    error = json.loads(caught.value.read())["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


def test_an_unknown_model_or_route_is_404(server: Server) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(server).completions.create(model="gpt-9", prompt="hi", max_tokens=2)
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(server.url + "/embeddings", timeout=30)
    assert missing.value.code == 404 and "error" in json.loads(missing.value.read())


def test_an_overload_is_answered_429_with_retry_after(folder: pathlib.Path) -> None:
    with running(folder, "--max-batch-size", "1", "--max-waiting", "0") as small:
        api = client(small)
        busy = api.completions.create(
            model=NAME,
            prompt="hello",
            max_tokens=1000,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        next(iter(busy))  # the one slot is taken
        with pytest.raises(openai.RateLimitError) as caught:
            api.completions.create(model=NAME, prompt="hi", max_tokens=2)
        assert caught.value.status_code == 429
        assert int(caught.value.response.headers["Retry-After"]) >= 1
        assert caught.value.body["code"] == "queue_full"
        busy.close()


def test_sigterm_finishes_the_streams_in_flight_then_stops(folder: pathlib.Path) -> None:
    server = start(folder)
    api = client(server)
    got: dict[str, Any] = {}
    first = threading.Event()

    def stream() -> None:
        chunks = api.completions.create(
            model=NAME,
            prompt="hello",
            max_tokens=300,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        texts, reasons = [], []
        for chunk in chunks:
            first.set()
            if chunk.choices:
                texts.append(chunk.choices[0].text)
                reasons.append(chunk.choices[0].finish_reason)
            if chunk.usage is not None:
                got["tokens"] = chunk.usage.completion_tokens
        got["reason"] = reasons[-1]

    worker = threading.Thread(target=stream)
    worker.start()
    assert first.wait(60)
    server.process.send_signal(signal.SIGTERM)
    worker.join(120)
    code, out = server.stop()
    assert got == {"reason": "length", "tokens": 300}, out
    assert code == 0 and out.rstrip().endswith("stopped"), out


def test_kserve_manifest_runs_the_server_in_a_container(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    yaml = pytest.importorskip("yaml")
    from onnx_export.cli import main

    path = tmp_path / "isvc.yaml"
    code = main(
        ["serve", str(folder), "--openai", "--kserve", "s3://bucket/llm", "--manifest", str(path)]
    )
    assert code == 0
    manifest = yaml.safe_load(path.read_text())
    assert manifest["kind"] == "InferenceService" and manifest["metadata"]["name"] == NAME
    container = manifest["spec"]["predictor"]["containers"][0]
    assert container["args"][:3] == ["serve", "/mnt/models", "--openai"]
    assert {"name": "STORAGE_URI", "value": "s3://bucket/llm"} in container["env"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8080}


def test_requests_prefilled_together_get_their_alone_tokens(
    model: hf.OrtModelForCausalLM,
) -> None:
    """The server's batcher: prompts of several lengths join in one left-padded prefill."""
    assert_prefilled_together_alone(model)


@pytest.mark.parametrize("given", ["file", "classifier folder", "missing"])
def test_openai_refuses_what_it_cannot_serve_in_one_line(
    given: str, tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A model file, another task's folder or no folder: exit 2, one line saying what to do."""
    from onnx_export.cli import main

    path = tmp_path / "classifier"
    if given == "file":
        path = tmp_path / "m.onnx"
        path.write_bytes(b"")
    elif given == "classifier folder":
        path.mkdir()
        (path / "onnx_export.json").write_text(json.dumps({"task": "text-classification"}))
    assert main(["serve", str(path), "--openai", "--port", "0"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    words = {
        "file": "got the file",
        "classifier folder": "holds a 'text-classification' model; --openai serves",
        "missing": "does not exist: give the folder",
    }[given]
    assert words in err, err
    if given != "missing":
        assert f"`onnx-export serve {path}` (without --openai)" in err, err
