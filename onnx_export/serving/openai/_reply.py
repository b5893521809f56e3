"""An answer as it is assembled from a request's events: chunks to stream, or one body.

Chat choices with tools are read for function calls (``_tools.py``): streamed, the text
that may begin a call is held until the choice ends and the calls follow as
``delta.tool_calls`` chunks; whole, ``message.tool_calls``; either way with
``finish_reason: "tool_calls"``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ._engine import Choices, Event
from ._errors import APIError
from ._protocol import Request
from ._tools import ToolCall, ToolCallStream, find_tool_calls

__all__ = ["Reply"]


class Reply:
    """The answer being assembled from a request's events."""

    def __init__(self, parsed: Request, choices: Choices, name: str) -> None:
        self.parsed, self.name = parsed, name
        chat = parsed.kind == "chat"
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.object = "chat.completion" if chat else "text_completion"
        self.created = int(time.time())
        rows = len(choices.prompts)
        self.texts = [""] * rows
        self.reasons: list[str | None] = [None] * rows
        self.tokens = [0] * rows
        self.prompt_tokens = sum(len(p) for p in parsed.prompts)
        self.error: str | None = None
        #: The functions the output may call (none: the text is all content).
        self.names = [t.name for t in parsed.tools] if parsed.tool_choice.mode != "none" else []
        self.streams = [ToolCallStream(self.names) for _ in range(rows)] if self.names else []

    @property
    def done(self) -> bool:
        return self.error is not None or all(r is not None for r in self.reasons)

    def take(self, event: Event) -> list[dict[str, Any]]:
        """Record ``event``; the stream chunks it makes (none when it adds nothing)."""
        if event.error is not None:
            self.error = event.error
            failure = {"message": event.error, "type": "server_error", "param": None, "code": None}
            return [{"error": failure}]
        index, text, reason = event.index, event.text, event.finish_reason
        self.texts[index] += text
        self.tokens[index] = event.tokens
        self.reasons[index] = reason
        calls: list[ToolCall] = []
        if self.streams:  # content goes out; what may be a call waits for the end
            text = self.streams[index].feed(text)
            if reason is not None:
                rest, calls = self.streams[index].finish()
                text += rest
        chunks = []
        if text or (reason is not None and not calls):
            chunks.append(self._chunk(index, text, None if calls else reason))
        for number, call in enumerate(calls):
            delta = {"tool_calls": [{"index": number, **call.as_openai()}]}
            chunks.append(self._chunk(index, None, None, delta=delta))
        if calls:
            chunks.append(self._chunk(index, None, "tool_calls"))
        return chunks

    def opening(self) -> list[dict[str, Any]]:
        """Chat streams open each choice with the assistant's role."""
        if self.parsed.kind != "chat":
            return []
        return [self._chunk(i, None, None, role="assistant") for i in range(len(self.texts))]

    def _chunk(
        self,
        index: int,
        text: str | None,
        reason: str | None,
        role: str | None = None,
        delta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if self.parsed.kind == "chat":
            delta = dict(delta or {})
            if role is not None:
                delta.update(role=role, content="")
            if text:
                delta["content"] = text
            choice: dict[str, Any] = {"index": index, "delta": delta}
            kind = "chat.completion.chunk"
        else:
            choice, kind = {"index": index, "text": text or ""}, "text_completion"
        choice.update(logprobs=None, finish_reason=reason)
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.name,
            "choices": [choice],
        }

    def _usage(self) -> dict[str, int]:
        completion = sum(self.tokens)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def usage_chunk(self) -> dict[str, Any]:
        chunk = self._chunk(0, None, None)
        chunk["choices"], chunk["usage"] = [], self._usage()
        return chunk

    def whole(self) -> dict[str, Any]:
        if self.error is not None:
            raise APIError(self.error, status=500, type="server_error")
        choices = []
        for index, (text, reason) in enumerate(zip(self.texts, self.reasons, strict=True)):
            choice: dict[str, Any] = {"index": index}
            ended = reason
            if self.parsed.kind == "chat":
                choice["message"], ended = self._message(text, reason)
            else:
                choice["text"] = text
            choice.update(logprobs=None, finish_reason=ended)
            choices.append(choice)
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.name,
            "choices": choices,
            "usage": self._usage(),
        }

    def _message(self, text: str, reason: str | None) -> tuple[dict[str, Any], str | None]:
        """A whole choice's message (its calls found), and its finish reason."""
        content, calls = find_tool_calls(text, self.names) if self.names else (text, [])
        if not calls:
            return {"role": "assistant", "content": text}, reason
        message = {
            "role": "assistant",
            "content": content.strip() or None,
            "tool_calls": [c.as_openai() for c in calls],
        }
        return message, "tool_calls"
