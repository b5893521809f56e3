"""A chat request's tools: checked, forced through a JSON schema, and found in the output.

``tools`` and ``tool_choice`` are checked field by field (:func:`parse_tools`,
:func:`parse_tool_choice`). ``tool_choice: "required"`` or a named function becomes a JSON
schema (:func:`forced_schema`): the output is then one ``{"name": ..., "arguments": {...}}``
object whose arguments are valid under the tool's ``parameters``. The model's text is read
for calls (:func:`find_tool_calls`, or :class:`ToolCallStream` as it streams) in the forms
chat templates teach:

- Hermes and Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, any
  number, after some text or not;
- Llama 3: the whole output one JSON object ``{"name": ..., "parameters": {...}}`` (or
  ``"arguments"``), after ``<|python_tag|>`` or not; or a JSON list of them (Mistral's,
  whose ``[TOOL_CALLS]`` marker is a special token, left out of the text).

A call must name one of the request's tools and carry an object of arguments; text that
is not such a call stays content.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ._errors import APIError

__all__ = [
    "Tool",
    "ToolCall",
    "ToolCallStream",
    "ToolChoice",
    "find_tool_calls",
    "forced_schema",
    "parse_tool_choice",
    "parse_tools",
]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_BLOCK = re.compile(re.escape(_OPEN) + r"(.*?)(?:" + re.escape(_CLOSE) + r"|$)", re.S)


@dataclasses.dataclass(frozen=True)
class Tool:
    """A function the model may call.

    Attributes:
        name: The function's name.
        parameters: The JSON schema of its arguments (an object schema).
        spec: The tool as the request sent it (what the chat template gets).
    """

    name: str
    parameters: Mapping[str, Any]
    spec: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class ToolChoice:
    """``tool_choice``: ``none``, ``auto``, ``required``, or ``function`` with its ``name``."""

    mode: Literal["none", "auto", "required", "function"] = "auto"
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A call found in the output.

    Attributes:
        name: The function called.
        arguments: Its arguments as JSON text (OpenAI's ``function.arguments``).
        id: The call's id (``call_...``).
    """

    name: str
    arguments: str
    id: str = dataclasses.field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def as_openai(self) -> dict[str, Any]:
        """``{"id", "type": "function", "function": {"name", "arguments"}}``."""
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


def parse_tools(value: Any) -> tuple[Tool, ...]:
    """The request's ``tools``: a 400 naming the entry (``tools[i]...``) when one is malformed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise APIError(
            "tools must be a list of {'type': 'function', 'function': {'name': ..., "
            f"'parameters': {{...}}}}}}, got {type(value).__name__}.",
            param="tools",
        )
    tools = [_tool(entry, f"tools[{i}]") for i, entry in enumerate(value)]
    names = [t.name for t in tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise APIError(
            f"tools names {twice} more than once: give each function once.", param="tools"
        )
    return tuple(tools)


def _tool(entry: Any, param: str) -> Tool:
    if not isinstance(entry, dict) or entry.get("type") != "function":
        raise APIError(
            f"{param} must be {{'type': 'function', 'function': {{...}}}}, got "
            f"{_short(entry)}: only function tools are served.",
            param=f"{param}.type",
        )
    function = entry.get("function")
    if not isinstance(function, dict):
        raise APIError(
            f"{param}.function must be an object with a 'name', got {_short(function)}.",
            param=f"{param}.function",
        )
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise APIError(
            f"{param}.function.name must be 1 to 64 letters, digits, '_', '.' or '-', got "
            f"{_short(name)}.",
            param=f"{param}.function.name",
        )
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise APIError(
            f"{param}.function.description must be a text.",
            param=f"{param}.function.description",
        )
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise APIError(
            f"{param}.function.parameters must be a JSON schema of an object ({{'type': "
            f"'object', 'properties': {{...}}}}), got {_short(parameters)}.",
            param=f"{param}.function.parameters",
        )
    return Tool(name, parameters, entry)


def parse_tool_choice(value: Any, tools: Sequence[Tool]) -> ToolChoice:
    """The request's ``tool_choice`` (``auto`` with tools, ``none`` without, by default)."""
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if value in ("none", "auto", "required"):
        if value != "none" and not tools:
            raise APIError(
                f"tool_choice {value!r} needs tools: send tools, or leave tool_choice out.",
                param="tool_choice",
            )
        return ToolChoice(value)
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise APIError(
            "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', "
            f"'function': {{'name': ...}}}}, got {_short(value)}.",
            param="tool_choice",
        )
    if name not in {t.name for t in tools}:
        raise APIError(
            f"tool_choice names the function {name!r}, which is not in tools "
            f"({', '.join(t.name for t in tools) or 'none given'}).",
            param="tool_choice.function.name",
        )
    return ToolChoice("function", name)


def forced_schema(tools: Sequence[Tool], choice: ToolChoice) -> dict[str, Any] | None:
    """The JSON schema of the output when ``choice`` forces a call; ``None`` otherwise.

    Example:
        >>> tool = Tool("f", {"type": "object"}, {})
        >>> forced_schema([tool], ToolChoice("function", "f"))["properties"]["name"]
        {'const': 'f'}
    """
    if choice.mode not in ("required", "function"):
        return None
    chosen = [t for t in tools if choice.mode == "required" or t.name == choice.name]
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": dict(t.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in chosen
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def find_tool_calls(text: str, names: Sequence[str]) -> tuple[str, list[ToolCall]]:
    """The content left and the calls in ``text``; ``(text, [])`` when it holds no valid call.

    Example:
        >>> content, calls = find_tool_calls('<tool_call>{"name": "f", "arguments": {}}'
        ...                                  '</tool_call>', ["f"])
        >>> content, calls[0].name, calls[0].arguments
        ('', 'f', '{}')
    """
    if _OPEN in text:
        blocks = _BLOCK.findall(text)
        calls = [_call(_loads(b.strip()), names) for b in blocks]
        if calls and all(c is not None for c in calls):
            head = text[: text.index(_OPEN)]
            end = text.rfind(_CLOSE)
            tail = text[end + len(_CLOSE) :] if end > text.rfind(_OPEN) else ""
            return head + tail, [c for c in calls if c is not None]
        return text, []
    body = text.strip().removeprefix(_PYTHON_TAG).strip()
    if body[:1] in ("{", "["):
        found = _loads(body)
        entries = found if isinstance(found, list) else [found]
        calls = [_call(e, names) for e in entries]
        if calls and all(c is not None for c in calls):
            return "", [c for c in calls if c is not None]
    return text, []


def _call(entry: Any, names: Sequence[str]) -> ToolCall | None:
    if not isinstance(entry, dict) or entry.get("name") not in names:
        return None
    arguments = entry.get("arguments", entry.get("parameters"))
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        arguments = _loads(arguments)
    if not isinstance(arguments, dict):
        return None
    return ToolCall(str(entry["name"]), json.dumps(arguments, ensure_ascii=False))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class ToolCallStream:
    """One streamed choice's text: content as it comes, a possible call held back.

    Text that may begin a call (a ``<tool_call>`` tag, or an output that opens with ``{``,
    ``[`` or ``<|python_tag|>``) is held until the choice ends; :meth:`finish` then gives
    the calls, or the held text as content when it was no call.

    Example:
        >>> stream = ToolCallStream(["f"])
        >>> stream.feed("Let me see. <tool"), stream.feed('_call>{"name": "f", ')
        ('Let me see. ', '')
        >>> stream.feed('"arguments": {"x": 1}}</tool_call>')
        ''
        >>> stream.finish()[1][0].arguments
        '{"x": 1}'
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.text = ""
        self._sent = 0
        self._holding = False

    def feed(self, delta: str) -> str:
        """The content of ``delta`` that can go out now."""
        self.text += delta
        if self._holding:
            return ""
        if self._sent == 0 and _may_open_json(self.text.lstrip()):
            self._holding = self.text.strip()[:1] in ("{", "[") or self.text.strip().startswith(
                _PYTHON_TAG
            )
            return ""
        start = self.text.find(_OPEN, self._sent)
        if start != -1:
            self._holding = True
            return self._take(start)
        return self._take(len(self.text) - _overlap(self.text, _OPEN))

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The content not sent yet and the calls, once the choice has ended."""
        content, calls = find_tool_calls(self.text, self.names)
        if not calls:
            return self._take(len(self.text)), []
        rest = content[self._sent :] if content.startswith(self.text[: self._sent]) else ""
        self._sent = len(self.text)
        return rest, calls

    def _take(self, end: int) -> str:
        if end <= self._sent:
            return ""
        delta, self._sent = self.text[self._sent : end], end
        return delta


def _may_open_json(text: str) -> bool:
    """The output so far is empty, or opens as a bare call could."""
    return text == "" or text[:1] in ("{", "[") or _PYTHON_TAG.startswith(text[:14])


def _overlap(text: str, tag: str) -> int:
    """The longest end of ``text`` that begins ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def _short(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
