"""A choice's text as its tokens come: safe deltas, and ``stop`` texts found and cut.

Each step decodes the choice's tokens and hands out the text past what was sent, minus
what could still change: a trailing replacement character (a multi-byte character split
across tokens) and a tail that begins one of the stop texts. A stop text found ends the
choice; the text before it is the choice's last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["TextScanner"]

#: Decodes token ids to text (special tokens left out).
Decode = Callable[[Sequence[int]], str]


class TextScanner:
    """Text deltas of one choice, stopping at the first of ``stop``.

    Example:
        >>> scanner = TextScanner(lambda ids: "".join(chr(i) for i in ids), ("cd",))
        >>> scanner.feed([97, 98, 99])
        ('ab', False)
        >>> scanner.feed([97, 98, 99, 100, 101])
        ('', True)
    """

    def __init__(self, decode: Decode, stop: Sequence[str]) -> None:
        self._decode = decode
        self._stop = tuple(stop)
        self._sent = 0
        self.stopped = False

    def feed(self, tokens: Sequence[int]) -> tuple[str, bool]:
        """The new safe text of ``tokens`` (all of the choice's so far), and whether it stops."""
        if self.stopped:
            return "", True
        text = self._decode(tokens)
        found = [i for i in (text.find(s) for s in self._stop) if i != -1]
        if found:
            end = max(min(found), self._sent)
            self.stopped = True
            return self._take(text, end), True
        safe = len(text.rstrip("\ufffd"))
        held = [_overlap(text[:safe], stop) for stop in self._stop]
        return self._take(text, safe - max(held, default=0)), False

    def finish(self, tokens: Sequence[int]) -> str:
        """The text held back at the end (none after a stop text)."""
        return "" if self.stopped else self._take(self._decode(tokens), None)

    def _take(self, text: str, end: int | None) -> str:
        end = len(text) if end is None else end
        if end <= self._sent:
            return ""
        delta, self._sent = text[self._sent : end], end
        return delta


def _overlap(text: str, stop: str) -> int:
    """The longest end of ``text`` that begins ``stop`` (shorter than ``stop``)."""
    for size in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0
