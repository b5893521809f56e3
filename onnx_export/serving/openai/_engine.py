"""One continuous-batching loop shared by every request of the server, on its own thread.

The HTTP side (asyncio) hands each request's choices to :meth:`Engine.submit` and gets
their text back as events through a callback; the loop thread owns the model's
:class:`~onnx_export.hf.runtime.generation._batching.ContinuousBatcher` and is the only
one that touches it. Between two decoding steps it takes new rows (up to ``max_batch``
in the batch and :data:`PREFILL_TOKENS` prompt tokens a step; up to ``max_waiting`` more
wait, beyond that a request is refused with
:class:`~._errors.Overloaded`), drops the rows of requests cancelled (a client gone), and
turns each row's new token into text (:class:`~._text.TextScanner`, which also finds the
``stop`` texts). Each row picks its tokens with its own chooser (greedy, or sampling with
its own seed, under a JSON-schema mask), so rows with different settings share one batch.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf.runtime._pretrained import token_ids
from onnx_export.hf.runtime.generation._causal import OrtModelForCausalLM
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._settings import make_chooser, resolve_settings
from onnx_export.hf.runtime.generation._structured import (
    ConstrainedChooser,
    GrammarTokenizer,
    OutputConstraint,
)

from ._errors import APIError, Overloaded, ServerClosing
from ._text import TextScanner

__all__ = ["Engine", "Event", "Choices"]

_log = logging.getLogger("onnx_export.serving.openai")
#: Prompt tokens that join the batch at one step at most (a row longer than that joins
#: alone). The rows joining are prefilled before the step (in runs of ``PREFILL_ROWS``), so
#: a burst joins at once and the batch decodes full from then on; 8 rows a step made a
#: burst of 32 join over 4 steps, 3 of them decoding a partial batch (and 3 more partial
#: steps at the end, as the last rows to join finish). The rows already decoding wait for
#: that prefill: it shows in their inter-token latency.
PREFILL_TOKENS = 2048


@dataclasses.dataclass(frozen=True)
class Event:
    """What the loop tells a request: text of a choice, its end, or a failure.

    Attributes:
        index: The choice (0 .. rows - 1).
        text: New text of the choice.
        finish_reason: ``"stop"`` (end token or stop text) or ``"length"`` when it ended.
        tokens: The choice's new tokens so far.
        error: A failure's message (the loop failed on this request).
    """

    index: int
    text: str = ""
    finish_reason: str | None = None
    tokens: int = 0
    error: str | None = None


#: Called (on the loop thread) with each event of a request.
Sink = Callable[[Event], None]


@dataclasses.dataclass(frozen=True)
class Choices:
    """The rows of one request: each prompt times ``n``, with their settings.

    Attributes:
        prompts: Each row's prompt tokens.
        max_tokens: New tokens at most, per row.
        stop: Texts that end a row.
        temperature: ``0`` greedy; ``None`` the folder's setting.
        top_p: Nucleus mass; ``None`` the folder's setting.
        seed: The first row's sampling seed (row i gets ``seed + i``).
        json_schema: Every row's output is JSON valid under it.
        ignore_eos: Rows run past the end token.
    """

    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    json_schema: Mapping[str, Any] | None = None
    ignore_eos: bool = False


class _Row:
    """One choice being decoded: its chooser, tokens and text."""

    def __init__(
        self,
        ticket: int,
        index: int,
        prompt: tuple[int, ...],
        chooser: TokenChooser | None,
        rng: np.random.Generator,
        scanner: TextScanner,
        max_tokens: int,
        ignore_eos: bool,
    ) -> None:
        self.ticket, self.index, self.prompt = ticket, index, list(prompt)
        self.ignore_eos = ignore_eos
        self.chooser, self.rng, self.scanner = chooser, rng, scanner
        self.max_tokens = max_tokens
        self.tokens: list[int] = []
        self.batch_id: int | None = None
        self.sent_tokens = 0

    def choose(self, logits: npt.NDArray[np.float32]) -> int:
        """The next token from the row's logits (called by the batcher)."""
        if self.chooser is None:
            token = int(logits.argmax())
        else:
            scores = np.array(logits[None], np.float32)
            sequence = np.array([self.prompt + self.tokens], np.int64)
            length = len(self.prompt) + self.max_tokens
            scores = self.chooser.process(
                scores, sequence, step=len(self.tokens), max_length=length
            )
            token = int(self.chooser.choose(scores, self.rng)[0])
        self.tokens.append(token)
        return token


class EngineThread:
    """What both engines share: a thread that decodes, its stop, the folder's grammars.

    A subclass sets ``model``, ``_eos``, ``_lock`` (a condition its thread waits on),
    ``_closing``, ``_thread``, ``_grammar`` and ``_grammar_lock`` in its ``__init__``.

    Example:
        >>> engine.close(timeout=30)  # doctest: +SKIP
    """

    model: Any
    _eos: tuple[int, ...]
    _lock: threading.Condition
    _closing: bool
    _thread: threading.Thread | None
    _grammar: GrammarTokenizer | None
    _grammar_lock: threading.Lock

    def close(self, timeout: float | None = None) -> None:
        """Take no new request, finish the ones there are, stop the thread."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def closing(self) -> bool:
        """The engine takes no new request."""
        return self._closing

    def _grammars(self) -> GrammarTokenizer:
        """The folder's structured-output tokenizer, built at the first schema."""
        with self._grammar_lock:
            if self._grammar is None:
                self._grammar = folder_grammar(self.model, self._eos)
            return self._grammar


class Engine(EngineThread):
    """The server's decoding loop over one exported text-generation model.

    Args:
        model: The loaded model (the default ``target="onnx"`` decoder or the fused one).
        max_batch: Rows decoded together at most.
        max_waiting: Rows that may wait for a slot; a request beyond is refused (429).

    Example:
        >>> engine = Engine(model, max_batch=32, max_waiting=64)  # doctest: +SKIP
        >>> engine.start()  # doctest: +SKIP
        >>> ticket = engine.submit(Choices(((1, 2, 3),), max_tokens=4), print)  # doctest: +SKIP
    """

    def __init__(self, model: OrtModelForCausalLM, *, max_batch: int, max_waiting: int) -> None:
        self.model = model
        self.max_batch, self.max_waiting = max_batch, max_waiting
        self._eos = token_ids(model.folder.setting("eos_token_id"))
        self._batcher = model.batcher()
        self._grammar: GrammarTokenizer | None = None
        self._grammar_lock = threading.Lock()
        self._lock = threading.Condition()
        self._inbox: list[tuple[str, Any]] = []
        self._queued: collections.deque[_Row] = collections.deque()
        self._rows: dict[int, _Row] = {}  # by batch id
        self._sinks: dict[int, Sink] = {}
        self._left: dict[int, int] = {}  # rows of each ticket still running
        self._tickets = itertools.count()
        self._closing = False
        self._thread: threading.Thread | None = None
        #: Counters: rows finished, rows cancelled, decoding steps.
        self.stats = {"completed": 0, "cancelled": 0, "steps": 0}

    # -- the HTTP side (any thread) --------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread."""
        self._thread = threading.Thread(target=self._loop, name="openai-batcher", daemon=True)
        self._thread.start()

    def submit(self, choices: Choices, sink: Sink) -> int:
        """Queue a request's rows; ``sink`` gets their events. Returns the request's ticket.

        Raises:
            Overloaded: The batch and the waiting queue are full.
            ServerClosing: The server is draining.
            GenerationError: The JSON schema cannot be compiled.
        """
        rows = len(choices.prompts)
        if rows > self.max_batch + self.max_waiting:
            raise APIError(
                f"The request asks for {rows} choices (prompts times n); this server holds "
                f"{self.max_batch + self.max_waiting} rows at most: ask for fewer.",
                param="n",
            )
        ticket = next(self._tickets)
        built = self._rows_of(ticket, choices)  # compiles a schema outside the lock
        with self._lock:
            if self._closing:
                raise ServerClosing()
            waiting = len(self._queued) + sum(len(a) for k, a in self._inbox if k == "add")
            free = self.max_batch - len(self._rows)
            if waiting + rows - max(free, 0) > self.max_waiting:
                raise Overloaded(
                    f"{len(self._rows)} rows are decoding and {waiting} wait, the most this "
                    f"server holds ({self.max_batch} in the batch, {self.max_waiting} "
                    "waiting): retry shortly.",
                )
            self._sinks[ticket] = sink
            self._left[ticket] = rows
            self._inbox.append(("add", built))
            self._lock.notify()
        return ticket

    def cancel(self, ticket: int) -> None:
        """Drop a request's rows (its client went away); a finished one is left alone."""
        with self._lock:
            self._inbox.append(("cancel", ticket))
            self._lock.notify()

    def load(self) -> dict[str, int]:
        """Rows decoding and waiting now, and the counters."""
        with self._lock:
            waiting = len(self._queued) + sum(len(a) for k, a in self._inbox if k == "add")
            return {"active": len(self._rows), "waiting": waiting, **self.stats}

    # -- building rows -------------------------------------------------------------------

    def _rows_of(self, ticket: int, choices: Choices) -> list[_Row]:
        settings = resolve_settings(self.model.folder.generation, **_sampling(choices))
        rows = []
        for index, prompt in enumerate(choices.prompts):
            base = make_chooser(self.model.folder.chooser, settings, self._eos, len(prompt))
            chooser: TokenChooser | None = base
            if choices.json_schema is not None:
                constraint = OutputConstraint.from_arguments(json_schema=dict(choices.json_schema))
                assert constraint is not None  # a schema was given
                masks = self._grammars().masks(constraint, 1)
                chooser = ConstrainedChooser.around(base, masks)
            elif base.passes_through():
                chooser = None  # greedy with no processor: the largest logit
            seed = None if choices.seed is None else choices.seed + index
            scanner = TextScanner(self.model.tokenizer.decode, choices.stop)
            rng = np.random.default_rng(seed)
            rows.append(
                _Row(
                    ticket,
                    index,
                    prompt,
                    chooser,
                    rng,
                    scanner,
                    choices.max_tokens,
                    choices.ignore_eos,
                )
            )
        return rows

    # -- the loop thread -----------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not (self._inbox or self._queued or self._rows or self._closing):
                    self._lock.wait()
                if self._closing and not (self._inbox or self._queued or self._rows):
                    return
                commands, self._inbox = self._inbox, []
            for kind, value in commands:
                if kind == "add":
                    self._queued.extend(value)
                else:
                    self._drop(value)
            try:
                self._step()
            except Exception as e:  # every request in flight is told, the loop goes on
                _log.exception("the decoding loop failed")
                self._fail_all(f"The decoding loop failed: {type(e).__name__}: {e}")

    def _step(self) -> None:
        budget = PREFILL_TOKENS
        while self._queued and len(self._rows) < self.max_batch:
            length = len(self._queued[0].prompt)
            if length > budget and budget < PREFILL_TOKENS:  # the first row always joins
                break
            budget -= length
            row = self._queued.popleft()
            row.batch_id = self._batcher.submit(
                row.prompt,
                max_new_tokens=row.max_tokens,
                eos_token_id=self._row_eos(row),
                choose=row.choose,
            )
            self._rows[row.batch_id] = row
        if not self._rows:
            return
        finished = {r.id for r in self._batcher.step()}
        self.stats["steps"] += 1
        for batch_id, row in list(self._rows.items()):
            if batch_id in finished:
                self._finish(row, "stop" if self._ended_by_eos(row) else "length")
                continue
            text, stopped = row.scanner.feed(row.tokens)
            if stopped:
                self._batcher.cancel(batch_id)
                self._finish(row, "stop", text)
            elif text:
                self._emit(row, Event(row.index, text, tokens=len(row.tokens)))

    def _row_eos(self, row: _Row) -> tuple[int, ...]:
        return () if row.ignore_eos else self._eos

    def _ended_by_eos(self, row: _Row) -> bool:
        return bool(row.tokens) and row.tokens[-1] in self._row_eos(row)

    def _finish(self, row: _Row, reason: str, text: str | None = None) -> None:
        if text is None:
            text, stopped = row.scanner.feed(row.tokens)
            text += row.scanner.finish(row.tokens)
            reason = "stop" if stopped else reason
        if row.batch_id is not None:
            self._rows.pop(row.batch_id, None)
        self.stats["completed"] += 1
        self._emit(row, Event(row.index, text, reason, tokens=len(row.tokens)))
        self._left[row.ticket] -= 1
        if not self._left[row.ticket]:
            del self._left[row.ticket]
            self._sinks.pop(row.ticket, None)

    def _emit(self, row: _Row, event: Event) -> None:
        sink = self._sinks.get(row.ticket)
        if sink is not None:
            sink(event)

    def _drop(self, ticket: int) -> None:
        """A cancelled request's rows leave the queue and the batch."""
        if ticket not in self._left:
            return
        self._queued = collections.deque(r for r in self._queued if r.ticket != ticket)
        for batch_id, row in list(self._rows.items()):
            if row.ticket == ticket:
                self._batcher.cancel(batch_id)
                del self._rows[batch_id]
                self.stats["cancelled"] += 1
        del self._left[ticket]
        self._sinks.pop(ticket, None)

    def _fail_all(self, message: str) -> None:
        """Every request in flight is told ``message``; the loop starts over, empty."""
        for sink in list(self._sinks.values()):
            sink(Event(0, error=message))
        self._queued.clear()
        self._rows.clear()
        self._left.clear()
        self._sinks.clear()
        self._batcher = self.model.batcher()


def folder_grammar(model: Any, eos: tuple[int, ...]) -> GrammarTokenizer:
    """The structured-output tokenizer of a served folder's model (text or image-text).

    ``eos`` is the folder's end tokens; when it has none, the tokenizer's ``eos_token``.
    """
    vocab = int(model.folder.config.get("vocab_size") or model.tokenizer.tokenizer.get_vocab_size())
    eos = eos or token_ids(model.tokenizer.token_id("eos_token"))
    return GrammarTokenizer(model.folder.path / "tokenizer.json", vocab, eos)


def _sampling(choices: Choices) -> dict[str, Any]:
    """generate()'s sampling settings for OpenAI's temperature and top_p."""
    given: dict[str, Any] = {}
    if choices.temperature is not None:
        given["do_sample"] = choices.temperature > 0
        if choices.temperature > 0:
            given["temperature"] = choices.temperature
    elif choices.top_p is not None and choices.top_p < 1:
        given["do_sample"] = True
    if choices.top_p is not None:
        given["top_p"] = choices.top_p
    return given
