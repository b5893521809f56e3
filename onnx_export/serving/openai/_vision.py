"""Requests to an image-text-to-text folder: decoded one at a time on a worker thread.

The continuous-batching loop (``_engine.py``) feeds token ids; a vision-language decoder
takes embeddings with the images' features written over their tokens, so its requests
run through :meth:`OrtModelForImageTextToText.generate` instead (the tokens its greedy
decoding gives, which ``tests/hf`` compares with transformers'), one choice after
another, on one thread off the event loop. :class:`VisionEngine` answers as
:class:`~._engine.Engine` does: the same events, the same queue bound (429 past it), the
same cancellation when a client leaves (checked at each token), the same drain on close.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
from typing import Any

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._pretrained import token_ids
from onnx_export.hf.runtime._vlm_pipeline import ImageTextToTextPipeline
from onnx_export.hf.runtime.generation._structured import GrammarTokenizer, OutputConstraint
from onnx_export.hf.runtime.generation._vlm import OrtModelForImageTextToText

from ._engine import Choices, EngineThread, Event, Sink, _sampling
from ._errors import APIError, Overloaded, ServerClosing
from ._text import TextScanner

__all__ = ["ImagePrompt", "VisionEngine"]

_log = logging.getLogger("onnx_export.serving.openai")


@dataclasses.dataclass(frozen=True)
class ImagePrompt:
    """A chat prompt's images as the model takes them (the pipeline's work, done once).

    Attributes:
        features: Each image's (tokens, hidden) features.
        arguments: ``generate``'s other image arguments (Qwen2-VL's ``image_grid_thw``).
    """

    features: tuple[Any, ...]
    arguments: dict[str, Any]


@dataclasses.dataclass
class _Job:
    ticket: int
    choices: Choices
    image: ImagePrompt | None
    sink: Sink
    left: int


class _Left(Exception):
    """The request's client went away: stop decoding it."""


class _Stopped(Exception):
    """A stop text was found: the choice has its text."""


class VisionEngine(EngineThread):
    """The server's decoding of an image-text-to-text folder: one choice at a time.

    Args:
        pipeline: The folder's pipeline (model, tokenizer, image processor).
        max_waiting: Choices that may wait besides the one decoding; a request beyond is
            refused (429).

    Example:
        >>> pipe = hf.pipeline("image-text-to-text", "out")  # doctest: +SKIP
        >>> engine = VisionEngine(pipe, max_waiting=8)  # doctest: +SKIP
    """

    def __init__(self, pipeline: ImageTextToTextPipeline, *, max_waiting: int) -> None:
        self.pipeline = pipeline
        self.model: OrtModelForImageTextToText = pipeline.model
        self.max_batch, self.max_waiting = 1, max_waiting
        self._eos = token_ids(self.model.folder.setting("eos_token_id"))
        self._lock = threading.Condition()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._running: _Job | None = None
        self._cancelled: set[int] = set()
        self._tickets = itertools.count()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._grammar: GrammarTokenizer | None = None
        self._grammar_lock = threading.Lock()
        #: Counters: choices finished, requests cancelled, tokens decoded.
        self.stats = {"completed": 0, "cancelled": 0, "steps": 0}

    # -- the HTTP side (any thread) --------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._loop, name="openai-vision", daemon=True)
        self._thread.start()

    def submit(self, choices: Choices, sink: Sink, image: ImagePrompt | None = None) -> int:
        """Queue a request's choices; ``sink`` gets their events. Returns its ticket.

        Raises:
            Overloaded: The waiting queue is full.
            ServerClosing: The server is draining.
            GenerationError: The JSON schema cannot be compiled.
        """
        rows = len(choices.prompts)
        if rows > 1 + self.max_waiting:
            raise APIError(
                f"The request asks for {rows} choices (n); this server holds "
                f"{1 + self.max_waiting} at most: ask for fewer.",
                param="n",
            )
        if choices.json_schema is not None:  # a bad schema is the client's 400, now
            constraint = OutputConstraint.from_arguments(json_schema=dict(choices.json_schema))
            assert constraint is not None  # a schema was given
            self._grammars().masks(constraint, 1)
        with self._lock:
            if self._closing:
                raise ServerClosing()
            held = self._held()
            if held + rows > 1 + self.max_waiting:
                raise Overloaded(
                    f"{held} choices are decoding or waiting, the most this server holds "
                    f"(one decoding, {self.max_waiting} waiting): retry shortly."
                )
            ticket = next(self._tickets)
            self._jobs.append(_Job(ticket, choices, image, sink, rows))
            self._lock.notify()
        return ticket

    def cancel(self, ticket: int) -> None:
        """Drop a request (its client went away); a finished one is left alone."""
        with self._lock:
            waiting = [j for j in self._jobs if j.ticket == ticket]
            for job in waiting:
                self._jobs.remove(job)
                self.stats["cancelled"] += 1
            if self._running is not None and self._running.ticket == ticket:
                self._cancelled.add(ticket)

    def load(self) -> dict[str, int]:
        """Choices decoding and waiting now, and the counters."""
        with self._lock:
            active = 0 if self._running is None else 1
            return {"active": active, "waiting": self._held() - active, **self.stats}

    def _held(self) -> int:
        running = 0 if self._running is None else self._running.left
        return running + sum(j.left for j in self._jobs)

    # -- the worker thread ---------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not (self._jobs or self._closing):
                    self._lock.wait()
                if not self._jobs:
                    return
                job = self._running = self._jobs.popleft()
            try:
                for index, prompt in enumerate(job.choices.prompts):
                    self._decode(job, index, prompt)
                    job.left -= 1
            except _Left:
                self.stats["cancelled"] += 1
            except Exception as e:  # this request is told; the worker goes on
                _log.exception("decoding an image-text-to-text request failed")
                job.sink(Event(0, error=f"Decoding failed: {type(e).__name__}: {e}"))
            finally:
                with self._lock:
                    self._running = None
                    self._cancelled.discard(job.ticket)

    def _decode(self, job: _Job, index: int, prompt: tuple[int, ...]) -> None:
        """One choice, its text sent as it comes."""
        choices = job.choices
        eos = () if choices.ignore_eos else self._eos
        tokens: list[int] = []
        scanner = TextScanner(self.model.tokenizer.decode, choices.stop)

        def streamer(step: Any) -> None:
            if job.ticket in self._cancelled:
                raise _Left
            tokens.append(int(step[0]))
            self.stats["steps"] += 1
            text, stopped = scanner.feed(tokens)
            if stopped:
                job.sink(Event(index, text, "stop", tokens=len(tokens)))
                raise _Stopped
            if text:
                job.sink(Event(index, text, tokens=len(tokens)))

        image = job.image
        arguments: dict[str, Any] = dict(image.arguments) if image is not None else {}
        if image is not None:
            arguments["image_features"] = list(image.features)
        if choices.json_schema is not None:
            arguments["json_schema"] = dict(choices.json_schema)
        seed = None if choices.seed is None else choices.seed + index
        try:
            self.model.generate(
                [list(prompt)],
                max_new_tokens=choices.max_tokens,
                eos_token_id=list(eos),
                seed=seed,
                streamer=streamer,
                **arguments,
                **_sampling(choices),
            )
        except _Stopped:
            self.stats["completed"] += 1
            return
        except GenerationError:
            if len(tokens) < choices.max_tokens:  # not a JSON cut short by max_tokens
                raise
        text, stopped = scanner.feed(tokens)
        text += scanner.finish(tokens)
        ended = bool(tokens) and tokens[-1] in eos
        reason = "stop" if stopped or ended else "length"
        self.stats["completed"] += 1
        job.sink(Event(index, text, reason, tokens=len(tokens)))
