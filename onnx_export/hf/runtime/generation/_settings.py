"""generate()'s settings, resolved as ``transformers`` resolves them.

A setting the caller leaves ``None`` comes from the folder's ``generation_config.json``,
else from ``transformers``' global defaults (``top_k=50`` when sampling, ...).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime.generation._logits import TokenChooser

__all__ = ["GenerationSettings", "make_chooser", "resolve_settings"]

#: transformers' GenerationConfig defaults for the settings generate() takes.
_DEFAULTS: Mapping[str, Any] = {
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "num_beams": 1,
    "num_return_sequences": 1,
    "length_penalty": 1.0,
    "early_stopping": False,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
    "min_length": 0,
    "bad_words_ids": None,
    "stop_strings": None,
}


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """One generate() call's settings, after the folder's defaults were applied."""

    do_sample: bool
    temperature: float
    top_k: int | None
    top_p: float | None
    num_beams: int
    num_return_sequences: int
    length_penalty: float
    early_stopping: bool | str
    repetition_penalty: float
    no_repeat_ngram_size: int
    min_new_tokens: int
    min_length: int
    bad_words_ids: tuple[tuple[int, ...], ...]
    stop_strings: tuple[str, ...]

    @property
    def expand(self) -> int:
        """How many rows each prompt becomes (beams, or samples per prompt)."""
        return max(self.num_beams, self.num_return_sequences)


def _whole(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise GenerationError(f"{name} must be an int >= {least}, got {value!r}.")
    return int(value)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GenerationError(f"{name} must be a number, got {value!r}.")
    return float(value)


def _early_stopping(value: Any) -> bool | str:
    if value is True or value is False or value == "never":
        return bool(value) if value != "never" else "never"
    raise GenerationError(f"early_stopping must be True, False or 'never', got {value!r}.")


def _bad_words(value: Any) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    message = f"bad_words_ids must be a list of lists of token ids, got {value!r}."
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not value:
        raise GenerationError(message)
    words = []
    for word in value:
        if isinstance(word, str | bytes) or not isinstance(word, Sequence) or not word:
            raise GenerationError(message)
        if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in word):
            raise GenerationError(message)
        words.append(tuple(int(t) for t in word))
    return tuple(words)


def _stop_strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    strings = (value,) if isinstance(value, str) else tuple(value)
    if not strings or not all(isinstance(s, str) and s for s in strings):
        raise GenerationError(f"stop_strings must be a string or a list of strings, got {value!r}.")
    return strings


def resolve_settings(generation: Mapping[str, Any], **given: Any) -> GenerationSettings:
    """``given`` (the caller's keywords) over ``generation`` over transformers' defaults."""
    unknown = set(given) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown generation settings {sorted(unknown)}")
    value = {
        k: given.get(k) if given.get(k) is not None else generation.get(k, _DEFAULTS[k])
        for k in _DEFAULTS
    }
    value = {k: _DEFAULTS[k] if v is None else v for k, v in value.items()}
    do_sample = bool(value["do_sample"])
    settings = GenerationSettings(
        do_sample=do_sample,
        temperature=_number("temperature", value["temperature"]),
        top_k=_whole("top_k", value["top_k"], 0) or None,
        top_p=_number("top_p", value["top_p"]),
        num_beams=_whole("num_beams", value["num_beams"], 1),
        num_return_sequences=_whole("num_return_sequences", value["num_return_sequences"], 1),
        length_penalty=_number("length_penalty", value["length_penalty"]),
        early_stopping=_early_stopping(value["early_stopping"]),
        repetition_penalty=_number("repetition_penalty", value["repetition_penalty"]),
        no_repeat_ngram_size=_whole("no_repeat_ngram_size", value["no_repeat_ngram_size"], 0),
        min_new_tokens=_whole("min_new_tokens", value["min_new_tokens"], 0),
        min_length=_whole("min_length", value["min_length"], 0),
        bad_words_ids=_bad_words(value["bad_words_ids"]),
        stop_strings=_stop_strings(value["stop_strings"]),
    )
    if settings.num_beams == 1 and not do_sample and settings.num_return_sequences > 1:
        raise GenerationError(
            "Greedy decoding returns one sequence a prompt: for num_return_sequences="
            f"{settings.num_return_sequences} pass num_beams >= it or do_sample=True."
        )
    return settings


def make_chooser(
    base: Callable[..., TokenChooser],
    settings: GenerationSettings,
    eos: tuple[int, ...],
    prompt_length: int,
) -> TokenChooser:
    """The chooser of one call: ``base`` (the folder's) with the call's processors.

    ``base`` gives the folder's forced and suppressed tokens; beam search keeps one token
    more than the EOS tokens in top-k and top-p, as transformers does.
    """
    keep = (len(eos) + 1 if eos else 2) if settings.num_beams > 1 else 1
    return dataclasses.replace(
        base(
            do_sample=settings.do_sample,
            temperature=settings.temperature,
            top_k=settings.top_k,
            top_p=settings.top_p,
        ),
        repetition_penalty=settings.repetition_penalty,
        no_repeat_ngram_size=settings.no_repeat_ngram_size,
        bad_words_ids=settings.bad_words_ids,
        min_length=settings.min_length,
        min_new_tokens=settings.min_new_tokens,
        eos_token_id=eos,
        prompt_length=prompt_length,
        min_tokens_to_keep=keep,
    )
