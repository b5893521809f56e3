"""Function calling on ``onnx-export serve FOLDER --openai``: ``tools``, ``tool_choice``,
``tool_calls`` out, and calls and their results in the history.

The parser is checked on fixed texts of each format (Hermes/Qwen ``<tool_call>`` blocks,
Llama 3's bare JSON, Mistral's JSON list), whole and streamed a character at a time.
Against a real server (the tiny Llama of ``openai_folder.py`` with a Hermes-style chat
template that lists the tools and renders earlier calls and tool results), a forced call
(``"required"`` or a named function) is decoded under the tool's JSON schema, so its
arguments validate; ``"auto"`` reads calls from the output, here made call-shaped by a
``response_format`` schema (a random model calls nothing by itself).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from onnx_export import hf
from onnx_export.serving.openai._errors import APIError
from onnx_export.serving.openai._tools import (
    ToolCallStream,
    find_tool_calls,
    parse_tool_choice,
    parse_tools,
)
from tests.serving import openai_folder
from tests.serving.openai_server import Server, client, running

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

NAME = "tiny-llama"
#: Hermes-style: the tools as JSON, earlier calls as <tool_call> blocks, tool results.
TEMPLATE = (
    "{{ bos_token }}{% if tools %}tools: {% for t in tools %}{{ t['function'] | tojson }}\n"
    "{% endfor %}{% endif %}{% for m in messages %}"
    "{% if m['role'] == 'assistant' and m['tool_calls'] is defined %}assistant: "
    "{% for c in m['tool_calls'] %}<tool_call>{\"name\": \"{{ c['function']['name'] }}\", "
    "\"arguments\": {{ c['function']['arguments'] | tojson }}}</tool_call>{% endfor %}\n"
    "{% elif m['role'] == 'tool' %}tool: {{ m['content'] }}\n"
    "{% else %}{{ m['role'] }}: {{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 8},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"zone": {"enum": ["utc", "cet"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "clock", "description": "time", "parameters": CLOCK}},
]
SCHEMAS = {"weather": WEATHER, "clock": CLOCK}
#: A call of ``clock`` as a bare JSON object (Llama 3's form).
CALL_SHAPE = {
    "type": "object",
    "properties": {"name": {"const": "clock"}, "arguments": CLOCK},
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "weather in paris?"}]


# -- the parser on fixed texts ----------------------------------------------------------

NAMES = ["weather", "clock"]
FORMATS = {
    "hermes": (
        'Let me look.\n<tool_call>\n{"name": "weather", "arguments": {"city": "paris", '
        '"days": 2}}\n</tool_call>',
        "Let me look.\n",
        [("weather", {"city": "paris", "days": 2})],
    ),
    "hermes-two": (
        '<tool_call>{"name": "weather", "arguments": {"city": "oslo", "days": 1}}</tool_call>'
        '<tool_call>{"name": "clock", "arguments": {"zone": "utc"}}</tool_call>',
        "",
        [("weather", {"city": "oslo", "days": 1}), ("clock", {"zone": "utc"})],
    ),
    "llama3": (
        '{"name": "clock", "parameters": {"zone": "cet"}}',
        "",
        [("clock", {"zone": "cet"})],
    ),
    "llama3-python-tag": (
        '<|python_tag|>{"name": "clock", "parameters": {"zone": "utc"}}',
        "",
        [("clock", {"zone": "utc"})],
    ),
    "mistral-list": (
        '[{"name": "clock", "arguments": {"zone": "utc"}}, {"name": "weather", '
        '"arguments": "{\\"city\\": \\"rome\\", \\"days\\": 3}"}]',
        "",
        [("clock", {"zone": "utc"}), ("weather", {"city": "rome", "days": 3})],
    ),
    "plain-text": ("It is sunny in Paris.", "It is sunny in Paris.", []),
    "unknown-function": (
        '{"name": "email", "arguments": {"to": "x"}}',
        '{"name": "email", "arguments": {"to": "x"}}',
        [],
    ),
    "broken-json": (
        '<tool_call>{"name": "clock", "arguments": {"zone": </tool_call>',
        '<tool_call>{"name": "clock", "arguments": {"zone": </tool_call>',
        [],
    ),
    "json-that-is-no-call": ('{"city": "paris"}', '{"city": "paris"}', []),
}


@pytest.mark.parametrize("case", list(FORMATS), ids=str)
def test_calls_are_found_in_each_format(case: str) -> None:
    text, content, expected = FORMATS[case]
    got_content, calls = find_tool_calls(text, NAMES)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == expected
    assert all(c.id.startswith("call_") for c in calls)


@pytest.mark.parametrize("case", list(FORMATS), ids=str)
def test_a_stream_gives_what_the_whole_text_gives(case: str) -> None:
    """Fed a character at a time: the same content (none of a call leaks) and calls."""
    text, content, expected = FORMATS[case]
    stream = ToolCallStream(NAMES)
    sent = "".join(stream.feed(c) for c in text)
    rest, calls = stream.finish()
    assert sent + rest == content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == expected


def test_plain_text_streams_as_it_comes() -> None:
    stream = ToolCallStream(NAMES)
    assert stream.feed("It is ") == "It is "
    assert stream.feed("sunny <to") == "sunny "  # may open a <tool_call>
    assert stream.feed("day") == "<today"
    assert stream.finish() == ("", [])


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        ({"type": "function"}, None, "tools"),
        ([{"type": "retrieval"}], None, "tools[0].type"),
        ([{"type": "function", "function": "weather"}], None, "tools[0].function"),
        ([{"type": "function", "function": {"name": "a b"}}], None, "tools[0].function.name"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}],
            None,
            "tools[0].function.parameters",
        ),
        (TOOLS + TOOLS[:1], None, "tools"),
        (TOOLS, "always", "tool_choice"),
        (TOOLS, {"type": "function", "function": {"name": "email"}}, "tool_choice.function.name"),
        (None, "required", "tool_choice"),
    ],
    ids=[
        "not-a-list",
        "not-a-function",
        "function-not-an-object",
        "bad-name",
        "parameters-not-an-object",
        "twice",
        "unknown-choice",
        "unknown-function",
        "required-without-tools",
    ],
)
def test_malformed_tools_are_named(tools: Any, choice: Any, param: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_tool_choice(choice, parse_tools(tools))
    assert caught.value.param == param and caught.value.status == 400


# -- against a real server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("tools")
    return openai_folder.build(root, template=TEMPLATE, max_position_embeddings=1024)


@pytest.fixture(scope="module")
def model(folder: pathlib.Path) -> hf.OrtModelForCausalLM:
    return hf.OrtModelForCausalLM.from_pretrained(folder)


@pytest.fixture(scope="module")
def server(folder: pathlib.Path) -> Iterator[Server]:
    with running(folder, "--max-batch-size", "4") as started:
        yield started


def _prompt_tokens(model: hf.OrtModelForCausalLM, messages: Any, tools: Any = None) -> int:
    rendered = model.tokenizer.render_chat(messages, tools=tools)
    return len(model.tokenizer.encode([rendered], add_special_tokens=False)[0])


def _streamed_calls(chunks: list[Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The calls a stream's ``delta.tool_calls`` chunks carry, assembled as a client does."""
    calls: dict[int, dict[str, Any]] = {}
    reason = None
    for chunk in chunks:
        for choice in chunk.choices:
            reason = choice.finish_reason or reason
            for part in choice.delta.tool_calls or []:
                call = calls.setdefault(part.index, {"name": "", "arguments": ""})
                call["name"] += part.function.name or ""
                call["arguments"] += part.function.arguments or ""
    return [calls[i] for i in sorted(calls)], reason


def test_a_named_function_is_called_with_valid_arguments(server: Server) -> None:
    choice = {"type": "function", "function": {"name": "weather"}}
    asked = {"messages": ASK, "tools": TOOLS, "tool_choice": choice}
    answer = client(server).chat.completions.create(
        model=NAME, max_tokens=120, temperature=0, **asked
    )
    (call,) = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls"
    assert call.type == "function" and call.function.name == "weather"
    assert call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    chunks = list(
        client(server).chat.completions.create(
            model=NAME, max_tokens=120, temperature=0, stream=True, **asked
        )
    )
    streamed, reason = _streamed_calls(chunks)
    assert streamed == [{"name": "weather", "arguments": call.function.arguments}]
    assert reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_required_calls_one_of_the_tools(server: Server) -> None:
    answer = client(server).chat.completions.create(
        model=NAME,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=120,
        temperature=0.9,
        seed=3,
    )
    (call,) = answer.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_auto_reads_a_call_from_the_output(server: Server) -> None:
    """The output made call-shaped by a response_format: ``auto`` answers tool_calls."""
    answer = client(server).chat.completions.create(
        model=NAME,
        messages=ASK,
        tools=TOOLS,
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": CALL_SHAPE}},
    )
    message = answer.choices[0].message
    assert message.content is None and answer.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls[0].function.name == "clock"
    jsonschema.validate(json.loads(message.tool_calls[0].function.arguments), CLOCK)


def test_none_leaves_tools_out_and_the_text_alone(
    server: Server, model: hf.OrtModelForCausalLM
) -> None:
    answer = client(server).chat.completions.create(
        model=NAME,
        messages=ASK,
        tools=TOOLS,
        tool_choice="none",
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": CALL_SHAPE}},
    )
    assert answer.usage.prompt_tokens == _prompt_tokens(model, ASK)
    assert not answer.choices[0].message.tool_calls
    assert json.loads(answer.choices[0].message.content)["name"] == "clock"


def test_calls_and_results_in_the_history_go_through_the_template(
    server: Server, model: hf.OrtModelForCausalLM
) -> None:
    arguments = {"city": "paris", "days": 2}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": json.dumps(arguments)},
    }
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    answer = client(server).chat.completions.create(
        model=NAME, messages=history, tools=TOOLS, max_tokens=4, temperature=0
    )
    rendered_call = {**call, "function": {"name": "weather", "arguments": arguments}}
    expected = [*ASK, {**history[1], "content": "", "tool_calls": [rendered_call]}, history[2]]
    text = model.tokenizer.render_chat(expected, tools=[t for t in TOOLS])
    assert '<tool_call>{"name": "weather", "arguments": {"city": "paris"' in text
    assert "tool: sunny" in text
    assert answer.usage.prompt_tokens == _prompt_tokens(model, expected, TOOLS)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice.function.name",
        ),
        (
            {
                "messages": [
                    *ASK,
                    {
                        "role": "assistant",
                        "tool_calls": [{"function": {"name": "weather", "arguments": "{oops"}}],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            {"tool_choice": "required", "response_format": {"type": "json_object"}},
            "response_format",
        ),
    ],
    ids=["bad-tool", "unknown-choice", "history-arguments", "forced-and-format"],
)
def test_bad_tool_fields_are_400_naming_them(
    server: Server, change: dict[str, Any], param: str
) -> None:
    body = {"messages": ASK, "tools": TOOLS, **change}
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(model=NAME, max_tokens=2, **body)
    assert caught.value.body["param"] == param, caught.value.body
