"""The OpenAI server's pieces without a server: request checking, stop texts, layering."""

from __future__ import annotations

import ast
import pathlib
from typing import Any

import pytest

from onnx_export.serving.openai._errors import APIError
from onnx_export.serving.openai._protocol import parse_chat, parse_completion
from onnx_export.serving.openai._text import TextScanner

SERVER = pathlib.Path(__file__).resolve().parents[2] / "onnx_export" / "serving" / "openai"


def _encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def _render(messages: list[dict[str, Any]], tools: Any, images: list[Any]) -> tuple[list[int], Any]:
    return _encode("".join(m["content"] for m in messages) + ("T" if tools else "")), None


def _chars(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def test_completion_fields_are_read() -> None:
    request = parse_completion(
        {
            "model": "m",
            "prompt": ["ab", "c"],
            "max_tokens": 5,
            "n": 2,
            "stop": "x",
            "temperature": 0.5,
            "top_p": 0.9,
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        _encode,
    )
    assert request.prompts == ((97, 98), (99,)) and request.n == 2 and request.stop == ("x",)
    assert (request.temperature, request.top_p, request.seed) == (0.5, 0.9, 3)
    assert request.stream and request.include_usage and request.max_tokens == 5


def test_completion_defaults_to_16_tokens_and_chat_to_the_model() -> None:
    assert parse_completion({"model": "m", "prompt": [1, 2]}, _encode).max_tokens == 16
    chat = parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, _render)
    assert chat.max_tokens is None and chat.prompts == (tuple(_encode("hi")),)


def test_chat_reads_text_parts_tools_and_json_schema() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
    }
    request = parse_chat(body, _render)
    assert request.prompts == (tuple(_encode("aT")),)
    assert request.json_schema == {"type": "object"}


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 17}, "n"),
        ({"seed": "7"}, "seed"),
        ({"stop": [""]}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"logprobs": 2}, "logprobs"),
        ({"model": 3}, "model"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, -2]}, "prompt"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema.schema"),
    ],
    ids=str,
)
def test_each_bad_field_is_named(change: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_completion({"model": "m", "prompt": "hi", **change}, _encode)
    assert caught.value.status == 400 and caught.value.param == param
    assert set(caught.value.body()["error"]) == {"message", "type", "param", "code"}


def test_image_parts_are_refused_naming_the_message() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with pytest.raises(APIError) as caught:
        parse_chat({"model": "m", "messages": [{"role": "user", "content": [image]}]}, _render)
    assert caught.value.param == "messages[0].content[0].image_url"
    assert "takes no images" in caught.value.message


def test_scanner_holds_back_what_may_begin_a_stop_text() -> None:
    scanner = TextScanner(_chars, ("STOP", "xy"))
    assert scanner.feed(_encode("ab S")) == ("ab ", False)
    assert scanner.feed(_encode("ab ST")) == ("", False)
    assert scanner.feed(_encode("ab STA")) == ("STA", False)
    assert scanner.feed(_encode("ab STAx")) == ("", False)
    assert scanner.feed(_encode("ab STAxy tail")) == ("", True)
    assert scanner.finish(_encode("ab STAxy tail")) == ""


def test_scanner_waits_for_a_whole_character() -> None:
    scanner = TextScanner(_chars, ())
    assert scanner.feed(_encode("a\ufffd")) == ("a", False)
    assert scanner.feed(_encode("ab")) == ("b", False)
    assert scanner.finish(_encode("abc")) == "c"


def test_the_server_imports_neither_torch_nor_transformers() -> None:
    for path in sorted(SERVER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                root = name.split(".")[0]
                assert root not in ("torch", "transformers"), f"{path.name} imports {name}"
                assert not name.startswith("onnx_export.hf.export"), f"{path.name}: {name}"


def test_image_parts_reach_the_template_as_images_in_order() -> None:
    PIL = pytest.importorskip("PIL.Image")
    import base64
    import io

    def png(color: tuple[int, int, int]) -> str:
        buffer = io.BytesIO()
        PIL.new("RGB", (3, 2), color).save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

    seen: dict[str, Any] = {}

    def render(messages: Any, tools: Any, images: list[Any]) -> tuple[list[int], Any]:
        seen.update(messages=messages, images=images)
        return [1, 2], "media"

    content = [
        {"type": "image_url", "image_url": {"url": png((255, 0, 0))}},
        {"type": "text", "text": "and"},
        {"type": "image_url", "image_url": png((0, 0, 255))},  # the URL alone, as some send
    ]
    request = parse_chat(
        {"model": "m", "messages": [{"role": "user", "content": content}]}, render, images=True
    )
    assert request.media == "media" and request.prompts == ((1, 2),)
    assert seen["messages"][0]["content"] == [
        {"type": "image"},
        {"type": "text", "text": "and"},
        {"type": "image"},
    ]
    assert [i.getpixel((0, 0)) for i in seen["images"]] == [(255, 0, 0), (0, 0, 255)]
