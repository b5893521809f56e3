"""Structured output: a JSON schema, a regex or a grammar masks each step's tokens.

``generate(json_schema=...)`` (or ``regex=``, ``grammar=``) compiles the constraint with
llguidance (the library onnxruntime-genai uses; chosen by ``bench/bench_structured.py``:
torch-free, compiling a schema costs about a millisecond where outlines-core builds its
whole index first, about a second for a 32k vocabulary, and xgrammar imports torch) over
the folder's ``tokenizer.json``. Each row keeps a matcher; at each step the tokens the
constraint forbids get ``-inf`` after the other processors and before sampling's warpers,
and the chosen token advances the row's matcher. A row ends when its constraint is
complete and it chose the end token (once complete, a matcher allows only that token
when nothing else may follow), so every output parses; a row that
reaches ``max_new_tokens`` first raises :class:`GenerationError` rather than returning a
document cut short.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime.generation._generate import Stopping
from onnx_export.hf.runtime.generation._logits import TokenChooser

__all__ = [
    "STRUCTURED_EXTRA",
    "OutputConstraint",
    "GrammarTokenizer",
    "GrammarMasks",
    "ConstrainedChooser",
    "constrain",
]

STRUCTURED_EXTRA = "pip install 'onnx-export[structured]'"
_NEG_INF = np.float32(-np.inf)
#: Compact JSON (``,`` and ``:`` without spaces): the fewest tokens, no whitespace runs.
_JSON_OPTIONS = {"whitespace_flexible": False}


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as e:
        raise GenerationError(
            f"json_schema=, regex= and grammar= need the llguidance package: {STRUCTURED_EXTRA}."
        ) from e
    return llguidance


@dataclasses.dataclass(frozen=True)
class OutputConstraint:
    """What the output must match: one JSON schema, regex or Lark grammar.

    Attributes:
        kind: ``"json_schema"``, ``"regex"`` or ``"grammar"``.
        source: The schema as JSON text, the regex, or the grammar (Lark syntax, as
            llguidance and onnxruntime-genai take it).

    Example:
        >>> OutputConstraint.from_arguments(regex="[0-9]+")
        OutputConstraint(kind='regex', source='[0-9]+')
    """

    kind: str
    source: str

    @classmethod
    def from_arguments(
        cls, json_schema: Any = None, regex: str | None = None, grammar: str | None = None
    ) -> OutputConstraint | None:
        """The constraint generate()'s keywords ask for; ``None`` when none was given.

        Raises:
            GenerationError: More than one given, or one of the wrong type.
        """
        given = {
            k: v
            for k, v in (("json_schema", json_schema), ("regex", regex), ("grammar", grammar))
            if v is not None
        }
        if not given:
            return None
        if len(given) > 1:
            raise GenerationError(
                f"Pass one of json_schema=, regex= and grammar=, got {sorted(given)}."
            )
        ((kind, value),) = given.items()
        if kind == "json_schema":
            return cls(kind, _schema_text(value))
        if not isinstance(value, str) or not value:
            raise GenerationError(f"{kind}= must be a non-empty string, got {value!r}.")
        return cls(kind, value)

    def grammar(self) -> str:
        """The llguidance grammar of this constraint."""
        matcher = _llguidance().LLMatcher
        if self.kind == "json_schema":
            return str(matcher.grammar_from_json_schema(self.source, defaults=_JSON_OPTIONS))
        if self.kind == "regex":
            return str(matcher.grammar_from_regex(self.source))
        return str(matcher.grammar_from_lark(self.source))


def _schema_text(value: Any) -> str:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as e:
            raise GenerationError(f"json_schema= is not valid JSON text: {e}.") from e
    else:
        parsed = value
    if not isinstance(parsed, Mapping):
        raise GenerationError(
            "json_schema= must be a JSON schema: a dict (or its JSON text), got "
            f"{type(parsed).__name__}."
        )
    return json.dumps(parsed)


class GrammarTokenizer:
    """A folder's ``tokenizer.json`` as llguidance reads it (built once a model: ~1 s at 32k).

    Args:
        path: The ``tokenizer.json`` file.
        vocab: The model's vocabulary (its logits' width), at least the tokenizer's.
        eos: The end tokens that close a constrained output.

    Example:
        >>> tokens = GrammarTokenizer("out/tokenizer.json", 32000, (2,))  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], vocab: int, eos: Sequence[int]) -> None:
        if not eos:
            raise GenerationError(
                "Structured output ends each row with the end token, and this model has none: "
                "pass eos_token_id= or set eos_token in tokenizer_config.json."
            )
        llguidance = _llguidance()
        try:
            text = open(path, encoding="utf-8").read()  # noqa: SIM115 - read at once
        except OSError as e:
            raise GenerationError(
                f"Structured output needs the folder's tokenizer.json: {e}. Export a "
                "checkpoint folder that has a fast tokenizer."
            ) from e
        try:
            self.tokenizer = llguidance.LLTokenizer(text, n_vocab=vocab, eos_token=list(eos))
        except (ValueError, RuntimeError) as e:
            raise GenerationError(
                f"llguidance cannot read this tokenizer.json for structured output: {e}"
            ) from e
        self.path = os.fspath(path)
        self.vocab = vocab
        self.eos = tuple(eos)

    def masks(self, constraint: OutputConstraint, rows: int) -> GrammarMasks:
        """Fresh matchers of ``constraint``, one a row."""
        llguidance = _llguidance()
        try:
            grammar = constraint.grammar()
        except ValueError as e:
            raise GenerationError(f"{constraint.kind}= cannot be compiled: {e}") from e
        first = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if first.is_error():
            raise GenerationError(
                f"{constraint.kind}= cannot be compiled: {first.get_error()}. Fix the "
                f"{constraint.kind.replace('_', ' ')}."
            )
        matchers = [first] + [first.deep_copy() for _ in range(rows - 1)]
        return GrammarMasks(matchers, self.vocab, constraint, self.eos)


class GrammarMasks:
    """One llguidance matcher a row: masks the scores, follows the chosen tokens.

    Example:
        >>> masks = tokenizer.masks(OutputConstraint("regex", "[0-9]+"), 1)  # doctest: +SKIP
        >>> scores = masks.apply(scores)  # doctest: +SKIP
    """

    def __init__(
        self, matchers: list[Any], vocab: int, constraint: OutputConstraint, eos: Sequence[int]
    ) -> None:
        self.matchers = matchers
        self.vocab = vocab
        self.constraint = constraint
        self.eos = frozenset(eos)
        #: Rows that chose an end token once their output was complete.
        self.finished = np.zeros(len(matchers), bool)
        self._bits = np.zeros((len(matchers), (vocab + 31) // 32), np.int32)

    def apply(self, scores: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``scores`` (rows, vocab) with the tokens each row's constraint forbids at -inf."""
        for row, matcher in enumerate(self.matchers):
            if self.finished[row]:
                continue  # ended: the loop writes padding after it
            view = self._bits[row]
            matcher.unsafe_compute_mask_ptr(view.ctypes.data, view.nbytes)
        bits = np.unpackbits(self._bits.view(np.uint8), axis=1, bitorder="little")
        width = scores.shape[-1]
        allowed = bits[:, :width].astype(bool)
        if allowed.shape[1] < width:  # logits past the tokenizer: never allowed
            allowed = np.pad(allowed, ((0, 0), (0, width - allowed.shape[1])))
        allowed[self.finished] = True
        return np.where(allowed, scores, _NEG_INF).astype(np.float32)

    def advance(self, tokens: npt.NDArray[np.int64]) -> None:
        """Each running row's matcher takes its chosen token."""
        for row, (matcher, token) in enumerate(zip(self.matchers, tokens.tolist(), strict=True)):
            if self.finished[row]:
                continue
            if token in self.eos and matcher.is_accepting():
                self.finished[row] = True
                continue
            if not matcher.consume_token(int(token)):
                raise GenerationError(  # the mask allowed it: a bug of ours or llguidance's
                    f"The {self.constraint.kind} constraint refused token {token} it had "
                    f"allowed: {matcher.get_error()}. Please report it."
                )

    def stopped(self, sequences: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Rows that ended their complete output with an end token (a Stopping check)."""
        return self.finished.copy()

    def check_complete(self, max_new_tokens: int) -> None:
        """A :class:`GenerationError` when a row ended before its constraint was complete."""
        unfinished = [
            i for i, m in enumerate(self.matchers) if not (self.finished[i] or m.is_accepting())
        ]
        if unfinished:
            which = "The output" if len(self.matchers) == 1 else f"Rows {unfinished}"
            raise GenerationError(
                f"{which} reached max_new_tokens={max_new_tokens} before matching the "
                f"{self.constraint.kind.replace('_', ' ')}: raise max_new_tokens (or bound "
                "the schema's strings and arrays)."
            )


@dataclasses.dataclass(frozen=True)
class ConstrainedChooser(TokenChooser):
    """A :class:`TokenChooser` whose scores are masked by a constraint before choosing.

    The mask comes after the logits processors and before sampling's temperature, top-k
    and top-p, so sampling draws only among allowed tokens.

    Attributes:
        masks: The rows' matchers.

    Example:
        >>> chooser = ConstrainedChooser.around(TokenChooser(), masks)  # doctest: +SKIP
    """

    masks: GrammarMasks | None = None

    @classmethod
    def around(cls, chooser: TokenChooser, masks: GrammarMasks) -> ConstrainedChooser:
        """``chooser``'s settings, constrained by ``masks``."""
        fields = {f.name: getattr(chooser, f.name) for f in dataclasses.fields(TokenChooser)}
        return cls(**fields, masks=masks)

    def passes_through(self) -> bool:
        """Never: the mask changes the scores."""
        return False

    def process(
        self,
        scores: npt.NDArray[np.float32],
        sequences: npt.NDArray[np.int64],
        *,
        step: int,
        max_length: int,
        padding: npt.NDArray[np.int64] | None = None,
    ) -> npt.NDArray[np.float32]:
        """The processors, the mask, then (when sampling) the warpers."""
        scores = super().process(
            scores, sequences, step=step, max_length=max_length, padding=padding
        )
        return scores if self.do_sample else self._masked(scores)

    def warp(self, scores: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The mask, then temperature, top-k and top-p."""
        return super().warp(self._masked(scores))

    def choose(self, scores: npt.NDArray[np.float32], rng: np.random.Generator) -> Any:
        """The next tokens; each row's matcher takes its own."""
        tokens = super().choose(scores, rng)
        if self.masks is not None:
            self.masks.advance(tokens)
        return tokens

    def _masked(self, scores: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        return scores if self.masks is None else self.masks.apply(scores)


def constrain(
    chooser: TokenChooser, stopping: Stopping, masks: GrammarMasks
) -> tuple[ConstrainedChooser, Stopping]:
    """``chooser`` masked by ``masks``; ``stopping`` also ends a row whose constraint is done."""
    before = stopping.stop

    def stop(sequences: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        done = masks.stopped(sequences)
        return done if before is None else done | before(sequences)

    return ConstrainedChooser.around(chooser, masks), dataclasses.replace(stopping, stop=stop)
