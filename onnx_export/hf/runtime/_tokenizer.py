"""Text in, text out without torch: tokenizers for ``tokenizer.json``, jinja2 for chats.

``tokenizer.json`` is read with the ``tokenizers`` library, chat templates are rendered with
``jinja2`` (the engine transformers renders them with).

Both are the optional ``text`` extra (``pip install 'onnx-export[text]'``); the rest of the
runtime needs neither.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import CheckpointError, GenerationError

__all__ = ["TextTokenizer", "TEXT_EXTRA", "left_pad"]

TEXT_EXTRA = "pip install 'onnx-export[text]'"
_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token")


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError as e:
        raise GenerationError(f"Text in and out needs the {name} package: {TEXT_EXTRA}.") from e


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_config(folder: pathlib.Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{os.fspath(path)!r} is not readable JSON: {e}.") from e
    return data if isinstance(data, dict) else {}


def _chat_template(folder: pathlib.Path, config: Mapping[str, Any]) -> str | None:
    """The default chat template: chat_template.jinja, chat_template.json or the config's."""
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    json_file = folder / "chat_template.json"
    template = (
        json.loads(json_file.read_text(encoding="utf-8")).get("chat_template")
        if json_file.is_file()
        else config.get("chat_template")
    )
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


class TextTokenizer:
    """A folder's ``tokenizer.json`` and chat template, without transformers.

    Attributes:
        tokenizer: The ``tokenizers.Tokenizer``.
        config: ``tokenizer_config.json`` (empty when the folder has none).
        chat_template: The default chat template's source, ``None`` without one.

    Example:
        >>> from onnx_export.hf.runtime._tokenizer import TextTokenizer
        >>> tokenizer = TextTokenizer.from_folder("out")  # doctest: +SKIP
        >>> tokenizer.decode(tokenizer.encode("hello world"))  # doctest: +SKIP
        'hello world'
    """

    def __init__(self, tokenizer: Any, config: Mapping[str, Any], chat_template: str | None):
        self.tokenizer = tokenizer
        self.config = dict(config)
        self.chat_template = chat_template
        self._pieces: dict[int, str] = {}

    @classmethod
    def from_folder(cls, path: str | os.PathLike[str]) -> TextTokenizer:
        """Read ``tokenizer.json`` (and ``tokenizer_config.json``) from ``path``.

        Raises:
            GenerationError: The folder has no ``tokenizer.json``, or the ``tokenizers``
                package is missing.
        """
        folder = pathlib.Path(path)
        file = folder / "tokenizer.json"
        if not file.is_file():
            raise GenerationError(
                f"{os.fspath(file)!r} is missing: text in and out needs the checkpoint's fast "
                "tokenizer (export a checkpoint folder that has tokenizer.json), or pass "
                "token ids."
            )
        tokenizers = _import("tokenizers")
        config = _read_config(folder)
        return cls(
            tokenizers.Tokenizer.from_file(os.fspath(file)), config, _chat_template(folder, config)
        )

    def special(self, name: str) -> str | None:
        """A special token's text (``"bos_token"``, ...), from tokenizer_config.json."""
        return _token_text(self.config.get(name))

    def token_id(self, name: str) -> int | None:
        """A special token's id, ``None`` when it is not set or not in the vocabulary."""
        text = self.special(name)
        found = None if text is None else self.tokenizer.token_to_id(text)
        return None if found is None else int(found)

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        """Each text's token ids (the tokenizer's post-processor adds its special tokens)."""
        encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [list(e.ids) for e in encoded]

    def decode(
        self, ids: Sequence[int] | npt.NDArray[np.int64], *, skip_special_tokens: bool = True
    ) -> str:
        """The text of ``ids``."""
        return str(
            self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        )

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """``messages`` through the chat template, as transformers' ``apply_chat_template``.

        ``tools`` (JSON schemas of functions, as transformers takes them) and ``documents``
        (dicts, e.g. ``title`` and ``text``) reach the template as ``tools`` and
        ``documents``, ``None`` when not given, as in transformers.
        """
        if self.chat_template is None:
            raise GenerationError(
                "This tokenizer has no chat template (tokenizer_config.json's chat_template or "
                "chat_template.jinja): pass the prompt as text instead of messages."
            )
        jinja2 = _import("jinja2")
        from jinja2 import ext, sandbox

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(
            x: Any,
            ensure_ascii: bool = False,
            indent: Any = None,
            separators: Any = None,
            sort_keys: bool = False,
        ) -> str:
            return json.dumps(
                x,
                ensure_ascii=ensure_ascii,
                indent=indent,
                separators=separators,
                sort_keys=sort_keys,
            )

        env = sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda f: datetime.datetime.now().strftime(f)
        specials = {name: self.special(name) for name in _SPECIAL if self.special(name) is not None}
        template = env.from_string(self.chat_template)
        values = {
            **specials,
            **extra,
            "messages": list(messages),
            "tools": _tool_schemas(tools),
            "documents": _documents(documents),
            "add_generation_prompt": add_generation_prompt,
        }
        return str(template.render(**values))

    def encode_prompt(self, prompt: Any, **chat: Any) -> tuple[list[list[int]], bool]:
        """The token ids of a text, a list of texts, or chat messages.

        The flag is True for one prompt (a text or messages), False for a list of texts.
        ``chat`` (``tools=``, ``documents=``) goes to :meth:`render_chat` with messages.
        """
        given = sorted(k for k, v in chat.items() if v is not None)
        is_chat = isinstance(prompt, list | tuple) and all(isinstance(m, Mapping) for m in prompt)
        if given and not (prompt and is_chat):  # an empty prompt fails below
            raise GenerationError(
                f"{', '.join(given)} go to the chat template: pass the prompt as chat messages "
                "([{'role': 'user', 'content': '...'}])."
            )
        if isinstance(prompt, str):
            return self.encode([prompt]), True
        if isinstance(prompt, list | tuple) and prompt:
            if is_chat:
                text = self.render_chat(prompt, **chat)  # the template writes the special tokens
                return self.encode([text], add_special_tokens=False), True
            if all(isinstance(t, str) for t in prompt):
                return self.encode(list(prompt)), False
        raise GenerationError(
            "prompt must be a text, a list of texts or a list of chat messages (dicts with "
            f"'role' and 'content'), got {type(prompt).__name__}."
        )

    def piece(self, token: int) -> str:
        """The text one token adds after others (how transformers' stop strings see it)."""
        if token not in self._pieces:
            base = self.tokenizer.encode("abcdef", add_special_tokens=False).ids
            before = self.tokenizer.decode(base, skip_special_tokens=False)
            after = self.tokenizer.decode([*base, token], skip_special_tokens=False)
            self._pieces[token] = after[len(before) :] if after.startswith(before) else after
        return self._pieces[token]

    def stop_check(self, strings: Sequence[str]) -> Any:
        """Which rows' last token completes one of ``strings``.

        transformers' rule: the stop string overlaps the last token, and the tokens before
        it spell the rest of it.
        """

        def check(sequences: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            return np.array([self._ends_with_stop(row, strings) for row in sequences], bool)

        return check

    def _ends_with_stop(self, row: npt.NDArray[np.int64], strings: Sequence[str]) -> bool:
        last = self.piece(int(row[-1]))
        need = max(len(s) for s in strings) + len(last)
        tail, i = "", len(row)
        while len(tail) < need and i > 0:
            i -= 1
            tail = self.piece(int(row[i])) + tail
        start_of_last = len(tail) - len(last)
        for stop in strings:
            at = tail.find(stop)
            while at != -1:
                if at + len(stop) > start_of_last:
                    return True
                at = tail.find(stop, at + 1)
        return False


def _tool_schemas(tools: Any) -> list[dict[str, Any]] | None:
    """``tools`` as the template sees them: JSON schemas (dicts), as transformers passes them."""
    if tools is None:
        return None
    if isinstance(tools, Mapping | str) or not isinstance(tools, Sequence):
        raise GenerationError(
            f"tools must be a list of JSON schemas (dicts), got {type(tools).__name__}."
        )
    for tool in tools:
        if not isinstance(tool, Mapping):
            hint = (
                " (transformers.utils.get_json_schema(fn) writes a function's schema)"
                if callable(tool)
                else ""
            )
            raise GenerationError(
                f"Each tool must be a JSON schema (a dict), got {type(tool).__name__}{hint}."
            )
    return [json.loads(json.dumps(tool)) for tool in tools]


def _documents(documents: Any) -> list[dict[str, Any]] | None:
    if documents is None:
        return None
    if (
        isinstance(documents, Mapping | str)
        or not isinstance(documents, Sequence)
        or not all(isinstance(d, Mapping) for d in documents)
    ):
        raise GenerationError("documents must be a list of dicts (e.g. 'title' and 'text').")
    return [json.loads(json.dumps(d)) for d in documents]


def left_pad(
    rows: list[list[int]], pad: int | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Token rows as one left-padded (batch, length) array and its attention mask."""
    if not rows or not all(rows):
        raise GenerationError("A prompt tokenized to no tokens: give some text.")
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), 0 if pad is None else pad, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :], mask[i, width - len(row) :] = row, 1
    return ids, mask
