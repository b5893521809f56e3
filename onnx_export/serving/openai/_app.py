"""The HTTP side: OpenAI's routes on Starlette, each request handed to the one :class:`Engine`.

Bodies are read and checked by hand (``_protocol.py``) so every refusal is OpenAI's error
body with the field at fault; streams are server-sent events (``data: {...}`` chunks, then
``data: [DONE]``). A client that goes away (mid-stream, or while a plain request waits)
cancels its rows, which frees their batch slots at the next step. With ``tools``, each
choice's text is read for function calls (``_tools.py``) and answered as ``tool_calls``.
An image-text-to-text folder's chat messages may carry images (``_images.py``), run
through the folder's pipeline (off the event loop) and decoded by a
:class:`~._vision.VisionEngine`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime.generation._causal import OrtModelForCausalLM

from ._engine import Choices, Engine, Event
from ._errors import APIError, Overloaded, ServerClosing
from ._protocol import Request, parse_chat, parse_completion
from ._reply import Reply
from ._vision import ImagePrompt, VisionEngine

__all__ = ["build_app"]

_log = logging.getLogger("onnx_export.serving.openai")
_POSITION_LIMITS = ("max_position_embeddings", "n_positions", "n_ctx")
#: New tokens at most when neither the request nor the model's positions bound them.
_UNBOUNDED_MAX_TOKENS = 4096


def build_app(engine: Engine | VisionEngine, name: str) -> Starlette:
    """The Starlette application serving ``engine``'s model as ``name``."""
    api = _Api(engine, name)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            await asyncio.to_thread(engine.close)

    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/models/{model:path}", api.model_card, methods=["GET"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
    ]
    handlers: Mapping[Any, Callable[..., Any]] = {
        APIError: _api_error,
        HTTPException: _http_error,
        Exception: _internal_error,
    }
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.model_name = name
    return app


class _Api:
    def __init__(self, engine: Engine | VisionEngine, name: str) -> None:
        self.engine, self.name = engine, name
        self.model: OrtModelForCausalLM = engine.model
        self.vision = engine if isinstance(engine, VisionEngine) else None
        folder = self.model.folder
        self.limit: int | None = folder.max_positions(*_POSITION_LIMITS)
        self.vocab: int | None = folder.config.get("vocab_size")
        self.created = int(time.time())

    async def health(self, request: HTTPRequest) -> Response:
        load = self.engine.load()
        status = "draining" if self.engine.closing else "ok"
        return JSONResponse({"status": status, **load}, 503 if self.engine.closing else 200)

    def _card(self) -> dict[str, Any]:
        return {
            "id": self.name,
            "object": "model",
            "created": self.created,
            "owned_by": "onnx-export",
        }

    async def models(self, request: HTTPRequest) -> Response:
        return JSONResponse({"object": "list", "data": [self._card()]})

    async def model_card(self, request: HTTPRequest) -> Response:
        self._check_model(request.path_params["model"], "model")
        return JSONResponse(self._card())

    async def completions(self, request: HTTPRequest) -> Response:
        body = await _body(request)
        parsed = parse_completion(body, self._encode)
        return await self._answer(request, parsed)

    async def chat(self, request: HTTPRequest) -> Response:
        body = await _body(request)
        if self.vision is None:
            parsed = parse_chat(body, self._render)
        else:  # images are decoded, resized and encoded: off the event loop
            parsed = await asyncio.to_thread(parse_chat, body, self._render, images=True)
        return await self._answer(request, parsed)

    # -- text in --------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return self.model.tokenizer.encode([text])[0]

    def _render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, images: list[Any]
    ) -> tuple[list[int], ImagePrompt | None]:
        tokenizer = self.model.tokenizer
        try:
            text = tokenizer.render_chat(messages, tools=tools)
        except GenerationError as e:
            raise APIError(str(e), param="messages") from e
        except Exception as e:  # the template's own raise_exception or a template bug
            raise APIError(f"The chat template refused the messages: {e}", param="messages") from e
        if not images or self.vision is None:
            return tokenizer.encode([text], add_special_tokens=False)[0], None
        try:  # the placeholders expanded, the images encoded (the pipeline's own steps)
            ids, features, arguments = self.vision.pipeline._inputs(images, text, False)
        except GenerationError as e:
            raise APIError(f"The images do not fit the prompt: {e}", param="messages") from e
        return ids, ImagePrompt(tuple(features), arguments)

    def _check_model(self, model: str, param: str) -> None:
        if model != self.name:
            raise APIError(
                f"The model {model!r} does not exist here: this server serves {self.name!r}.",
                param=param,
                code="model_not_found",
                status=404,
            )

    def _choices(self, parsed: Request) -> Choices:
        self._check_model(parsed.model, "model")
        longest = max(len(p) for p in parsed.prompts)
        if self.vocab is not None:
            bad = sorted({t for p in parsed.prompts for t in p if t >= self.vocab})
            if bad:
                raise APIError(
                    f"Token ids {bad[:8]} are outside the vocabulary [0, {self.vocab}).",
                    param="prompt",
                )
        room = _UNBOUNDED_MAX_TOKENS if self.limit is None else self.limit - longest
        if room < 1:
            raise APIError(
                f"The prompt is {longest} tokens; this model reads {self.limit} positions, "
                "and the answer needs at least one more: shorten the prompt.",
                param="messages" if parsed.kind == "chat" else "prompt",
                code="context_length_exceeded",
            )
        max_tokens = (
            min(room, _UNBOUNDED_MAX_TOKENS) if parsed.max_tokens is None else parsed.max_tokens
        )
        if max_tokens > room:
            raise APIError(
                f"The prompt ({longest} tokens) plus max_tokens={max_tokens} pass this model's "
                f"{self.limit} positions: ask for at most {room} tokens.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return Choices(
            prompts=tuple(p for p in parsed.prompts for _ in range(parsed.n)),
            max_tokens=max_tokens,
            stop=parsed.stop,
            temperature=parsed.temperature,
            top_p=parsed.top_p,
            seed=parsed.seed,
            json_schema=parsed.json_schema,
            ignore_eos=parsed.ignore_eos,
        )

    # -- text out -------------------------------------------------------------------------

    async def _answer(self, request: HTTPRequest, parsed: Request) -> Response:
        choices = self._choices(parsed)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def sink(event: Event) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        submit: Callable[..., int] = self.engine.submit
        if self.vision is not None:
            submit = functools.partial(self.vision.submit, image=parsed.media)
        try:
            if choices.json_schema is None:
                ticket = submit(choices, sink)
            else:  # compiling a schema takes a while: off the event loop
                ticket = await asyncio.to_thread(submit, choices, sink)
        except GenerationError as e:
            raise APIError(str(e), param=parsed.schema_field) from e
        reply = Reply(parsed, choices, self.name)
        if parsed.stream:
            return StreamingResponse(
                self._stream(reply, events, ticket),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await self._whole(request, reply, events, ticket)

    async def _whole(
        self, request: HTTPRequest, reply: Reply, events: asyncio.Queue[Event], ticket: int
    ) -> Response:
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            while not reply.done:
                getter = asyncio.ensure_future(events.get())
                await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    self.engine.cancel(ticket)
                    return Response(status_code=499)
                reply.take(getter.result())
        finally:
            gone.cancel()
        return JSONResponse(reply.whole())

    async def _stream(
        self, reply: Reply, events: asyncio.Queue[Event], ticket: int
    ) -> AsyncIterator[str]:
        try:
            for chunk in reply.opening():
                yield _sse(chunk)
            while not reply.done:
                event = await events.get()
                for chunk in reply.take(event):
                    yield _sse(chunk)
            if reply.parsed.include_usage:
                yield _sse(reply.usage_chunk())
            yield "data: [DONE]\n\n"
        finally:
            if not reply.done:
                self.engine.cancel(ticket)


async def _body(request: HTTPRequest) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as e:
        raise APIError(f"The request body is not valid JSON: {e}.") from e


async def _disconnected(request: HTTPRequest) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _sse(chunk: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"


async def _api_error(request: HTTPRequest, error: Exception) -> Response:
    assert isinstance(error, APIError)  # registered for APIError
    headers = {}
    if isinstance(error, Overloaded | ServerClosing):
        headers["Retry-After"] = str(error.retry_after)
    return JSONResponse(error.body(), error.status, headers=headers)


async def _http_error(request: HTTPRequest, error: Exception) -> Response:
    assert isinstance(error, HTTPException)  # registered for HTTPException
    found = APIError(
        f"{request.method} {request.url.path}: {error.detail}. This server answers GET "
        "/v1/models, POST /v1/completions, POST /v1/chat/completions and GET /health.",
        status=error.status_code,
        code="not_found" if error.status_code == 404 else None,
    )
    return await _api_error(request, found)


async def _internal_error(request: HTTPRequest, error: Exception) -> Response:
    _log.error("request failed", exc_info=error)
    failure = APIError(
        f"The server failed on this request ({type(error).__name__}); its log has the details.",
        status=500,
        type="server_error",
    )
    return await _api_error(request, failure)
