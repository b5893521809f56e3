"""OpenAI's request bodies, checked field by field into one :class:`Request`.

Each bad field is an :class:`~._errors.APIError` naming the field (``param``), what came and
what is accepted, so a client gets a 400 with OpenAI's error body, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ._errors import APIError
from ._images import decode_image
from ._tools import Tool, ToolChoice, forced_schema, parse_tool_choice, parse_tools

__all__ = ["Request", "parse_chat", "parse_completion"]

#: Turns a text prompt into token ids.
Encode = Callable[[str], list[int]]
#: Renders chat messages (and tools) through the chat template: the prompt's token ids and,
#: when the messages carry images (decoded, in order), what the model needs of them.
RenderChat = Callable[
    [list[dict[str, Any]], list[dict[str, Any]] | None, list[Any]], tuple[list[int], Any]
]

_MAX_N = 16
NO_TOOLS = ToolChoice("none")
_MAX_STOPS = 4
#: Fields of OpenAI's API this server does not compute; a request that sets one is refused.
_UNSUPPORTED = {
    "logprobs": "token log-probabilities",
    "top_logprobs": "token log-probabilities",
    "echo": "echoing the prompt",
    "suffix": "insertion (suffix)",
    "best_of": "best_of",
    "logit_bias": "logit_bias",
    "audio": "audio output",
}


@dataclasses.dataclass(frozen=True)
class Request:
    """One checked request of ``/v1/completions`` or ``/v1/chat/completions``.

    Attributes:
        kind: ``"chat"`` or ``"completion"``.
        model: The model the client named.
        prompts: Each prompt's token ids (a chat has one; a completion one or more).
        max_tokens: New tokens at most per choice; ``None``: as many as the model's
            positions leave (chat) or 16 (completions, OpenAI's default).
        n: Choices per prompt.
        stop: Texts that end a choice (left out of its text).
        temperature: ``0`` greedy, above sampling; ``None``: the folder's generation config.
        top_p: Nucleus sampling's probability mass; ``None``: the folder's.
        seed: The sampling generator's seed.
        json_schema: The output must be JSON valid under this schema (structured output).
        stream: Answer with server-sent events.
        include_usage: With ``stream``: a last chunk carries the token counts.
        ignore_eos: Keep going past the end token (a vLLM extension, for benchmarks).
        tools: The functions the model may call (chat).
        tool_choice: Whether and which function to call; ``none``: the output is not
            read for calls.
        schema_field: The field ``json_schema`` came from (``response_format`` or
            ``tool_choice``), for errors.
        media: The prompt's images as the model takes them (image-text-to-text folders).
    """

    kind: Literal["chat", "completion"]
    model: str
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int | None = None
    n: int = 1
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    json_schema: Mapping[str, Any] | None = None
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = NO_TOOLS
    schema_field: str = "response_format"
    media: Any = None


def parse_completion(body: Any, encode: Encode) -> Request:
    """A ``/v1/completions`` body: ``prompt`` is a text, texts, token ids or lists of them."""
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts = [encode(prompt)]
    elif _token_list(prompt):
        prompts = [list(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [encode(p) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(_token_list(p) for p in prompt):
        prompts = [list(p) for p in prompt]
    else:
        raise APIError(
            "prompt must be a text, a list of texts, a list of token ids or a list of such "
            f"lists, got {_describe(prompt)}.",
            param="prompt",
        )
    if not all(prompts):
        raise APIError("A prompt tokenized to no tokens: give some text.", param="prompt")
    return _request("completion", body, prompts, default_max_tokens=16)


def parse_chat(body: Any, render: RenderChat, *, images: bool = False) -> Request:
    """A ``/v1/chat/completions`` body: ``messages`` (and ``tools``) go through the template.

    ``images``: the model takes images (``image_url`` content parts, as data URLs); when
    ``False`` such a part is refused, naming it.
    """
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError(
            f"messages must be a non-empty list of messages, got {_describe(messages)}.",
            param="messages",
        )
    decoded: list[Any] = []
    checked = [_message(m, i, decoded if images else None) for i, m in enumerate(messages)]
    tools = parse_tools(body.get("tools"))
    choice = parse_tool_choice(body.get("tool_choice"), tools)
    forced = forced_schema(tools, choice)
    if forced is not None and body.get("response_format") not in (None, {"type": "text"}):
        raise APIError(
            f"tool_choice {choice.mode!r} makes the output a function call: leave "
            "response_format out (or send tool_choice 'auto').",
            param="response_format",
        )
    given = [dict(t.spec) for t in tools] if tools and choice.mode != "none" else None
    ids, media = render(checked, given, decoded)
    request = _request("chat", body, [ids], default_max_tokens=None)
    return dataclasses.replace(
        request,
        tools=tools,
        tool_choice=choice,
        media=media,
        json_schema=forced if forced is not None else request.json_schema,
        schema_field="tool_choice" if forced is not None else "response_format",
    )


def _request(
    kind: Literal["chat", "completion"],
    body: Mapping[str, Any],
    prompts: Sequence[Sequence[int]],
    *,
    default_max_tokens: int | None,
) -> Request:
    for name, what in _UNSUPPORTED.items():
        value = body.get(name)
        if not (value in (None, False, 0) or value == {} or (name == "best_of" and value == 1)):
            raise APIError(f"This server does not compute {what}: leave {name} out.", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise APIError(
            f"model must be the served model's name, got {_describe(model)}.", param="model"
        )
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    which = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise APIError("stream_options must be an object.", param="stream_options")
    return Request(
        kind=kind,
        model=model,
        prompts=tuple(tuple(p) for p in prompts),
        max_tokens=default_max_tokens if max_tokens is None else _whole(max_tokens, which, least=1),
        n=_whole(body.get("n", 1) if body.get("n") is not None else 1, "n", least=1, most=_MAX_N),
        stop=_stop(body.get("stop")),
        temperature=_number(body.get("temperature"), "temperature", 0.0, 2.0),
        top_p=_number(body.get("top_p"), "top_p", 0.0, 1.0, open_low=True),
        seed=None if body.get("seed") is None else _whole(body["seed"], "seed", least=0),
        json_schema=_response_format(body.get("response_format")),
        stream=_flag(body.get("stream"), "stream"),
        include_usage=_flag((stream_options or {}).get("include_usage"), "stream_options"),
        ignore_eos=_flag(body.get("ignore_eos"), "ignore_eos"),
    )


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise APIError(f"The request body must be a JSON object, got {_describe(body)}.")
    return body


def _message(message: Any, index: int, images: list[Any] | None) -> dict[str, Any]:
    """A checked message; image parts decoded into ``images`` (``None``: refused)."""
    param = f"messages[{index}]"
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise APIError(
            f"Each message must be an object with a 'role' and 'content', got "
            f"{_describe(message)}.",
            param=param,
        )
    content = message.get("content")
    if isinstance(content, list):
        parts = [_part(p, f"{param}.content[{j}]", images) for j, p in enumerate(content)]
        if any(p["type"] == "image" for p in parts):
            content = parts  # the template places the images
        else:
            content = "".join(p["text"] for p in parts)
    elif content is not None and not isinstance(content, str):
        raise APIError(
            f"{param}.content must be a text or a list of content parts, got {_describe(content)}.",
            param=f"{param}.content",
        )
    checked = {**message, "content": content if content is not None else ""}
    if message.get("tool_calls") is not None:
        checked["tool_calls"] = _history_calls(message["tool_calls"], f"{param}.tool_calls")
    return checked


def _part(part: Any, param: str, images: list[Any] | None) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text", ""), str):
        return {"type": "text", "text": part.get("text", "")}
    if kind == "image_url":
        if images is None:
            raise APIError(
                f"This model takes no images ({param} is an image_url): send text parts "
                "only, or serve a folder exported for image-text-to-text.",
                param=f"{param}.image_url",
            )
        assert isinstance(part, dict)  # kind came from it
        images.append(decode_image(part.get("image_url"), f"{param}.image_url"))
        return {"type": "image"}
    raise APIError(
        f"{param} must be a content part {{'type': 'text', 'text': ...}}"
        f"{' or an image_url' if images is not None else ''}, got {_describe(part)}.",
        param=param,
    )


def _history_calls(calls: Any, param: str) -> list[dict[str, Any]]:
    """An assistant message's earlier ``tool_calls``, arguments as objects (for templates)."""
    if not isinstance(calls, list):
        raise APIError(f"{param} must be a list of tool calls.", param=param)
    checked = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str):
            raise APIError(
                f"{param}[{j}] must be {{'id': ..., 'type': 'function', 'function': {{'name': "
                f"..., 'arguments': '{{...}}'}}}}, got {_describe(call)}.",
                param=f"{param}[{j}]",
            )
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                arguments = None
        if not isinstance(arguments, dict):
            raise APIError(
                f"{param}[{j}].function.arguments must be a JSON object (as text), got "
                f"{_describe(function.get('arguments'))}.",
                param=f"{param}[{j}].function.arguments",
            )
        assert isinstance(call, dict)  # function came from it
        checked.append({**call, "function": {**function, "arguments": arguments}})
    return checked


def _response_format(value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError:
                schema = None
        if not isinstance(schema, dict):
            raise APIError(
                "response_format.json_schema.schema must be a JSON schema (an object).",
                param="response_format.json_schema.schema",
            )
        return schema
    raise APIError(
        "response_format must be {'type': 'text'}, {'type': 'json_object'} or {'type': "
        f"'json_schema', 'json_schema': {{'name': ..., 'schema': {{...}}}}}}, got "
        f"{_describe(value)}.",
        param="response_format",
    )


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > _MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise APIError(
            f"stop must be a text or a list of up to {_MAX_STOPS} non-empty texts, got "
            f"{_describe(value)}.",
            param="stop",
        )
    return tuple(stops)


def _whole(value: Any, name: str, *, least: int, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise APIError(f"{name} must be an integer >= {least}, got {_describe(value)}.", param=name)
    if most is not None and value > most:
        raise APIError(f"{name} must be at most {most}, got {value}.", param=name)
    return value


def _number(
    value: Any, name: str, low: float, high: float, *, open_low: bool = False
) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (low < value if open_low else low <= value) or value > high:
        bracket = "(" if open_low else "["
        raise APIError(
            f"{name} must be a number in {bracket}{low}, {high}], got {_describe(value)}.",
            param=name,
        )
    return float(value)


def _flag(value: Any, name: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise APIError(f"{name} must be true or false, got {_describe(value)}.", param=name)
    return value


def _token_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def _describe(value: Any) -> str:
    text = json.dumps(value) if _jsonable(value) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
