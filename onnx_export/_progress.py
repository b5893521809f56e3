"""A tiny progress bar on stderr for long exports and saves (no tqdm).

It draws only when asked (``enabled=True``) or, by default, when the stream is a
terminal; redraws are throttled, so calling :meth:`ProgressBar.advance` once per FX node
or per tensor costs next to nothing when nothing is drawn.

Usage::

    with ProgressBar("Translating", total=len(nodes), unit="nodes") as bar:
        for node in nodes:
            ...
            bar.advance()
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["ProgressBar", "progress_enabled", "translation_progress"]

_WIDTH = 28
_BYTE_UNITS = ((2**30, "GB"), (2**20, "MB"), (2**10, "KB"))


def progress_enabled(enabled: bool | None, stream: TextIO | None = None) -> bool:
    """Whether to draw: ``enabled`` if given, else whether ``stream`` (stderr) is a TTY."""
    if enabled is not None:
        return enabled
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _amount(value: float, unit: str) -> str:
    if unit != "B":
        return f"{int(value)}"
    for scale, name in _BYTE_UNITS:
        if value >= scale:
            return f"{value / scale:.2f} {name}"
    return f"{int(value)} B"


class ProgressBar:
    """A one-line progress bar, redrawn in place (carriage return, no newline).

    Args:
        label: What is progressing (``"Translating"``, ``"Saving weights"``).
        total: The amount at the end (nodes, tensors, bytes); 0 when unknown.
        unit: ``"B"`` shows amounts as KB/MB/GB; anything else is shown after counts.
        enabled: Draw or not; ``None`` draws only when ``stream`` is a terminal.
        stream: Where to draw (stderr by default).
        min_interval: Seconds between redraws.
    """

    def __init__(
        self,
        label: str,
        total: float,
        *,
        unit: str = "",
        enabled: bool | None = None,
        stream: TextIO | None = None,
        min_interval: float = 0.1,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = progress_enabled(enabled, self.stream)
        self._min_interval = min_interval
        self._start = time.perf_counter()
        self._last_draw = float("-inf")
        self._drawn = False
        self._drawn_done = -1.0
        self._closed = False

    def advance(self, amount: float = 1, *, detail: str = "") -> None:
        """Add ``amount`` to what is done and redraw if enough time has passed."""
        self.done += amount
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last_draw >= self._min_interval or self.done >= self.total > 0:
            self._draw(now, detail)

    def close(self) -> None:
        """Draw the final state and end the line (once)."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            if self._drawn_done != self.done:
                self._draw(time.perf_counter(), "")
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def render(self, detail: str = "") -> str:
        """The bar's text as it would be drawn now."""
        elapsed = time.perf_counter() - self._start
        suffix = "" if self.unit == "B" or not self.unit else f" {self.unit}"
        if self.total > 0:
            fraction = min(self.done / self.total, 1.0)
            filled = int(fraction * _WIDTH)
            bar = "#" * filled + "." * (_WIDTH - filled)
            amounts = f"{_amount(self.done, self.unit)}/{_amount(self.total, self.unit)}{suffix}"
            text = f"{self.label} [{bar}] {fraction:4.0%} {amounts} {elapsed:.1f} s"
        else:
            text = f"{self.label} {_amount(self.done, self.unit)}{suffix} {elapsed:.1f} s"
        return f"{text} {detail}".rstrip()

    def _draw(self, now: float, detail: str) -> None:
        self._last_draw, self._drawn_done = now, self.done
        text = self.render(detail)[:119]
        self.stream.write(f"\r{text:<119}" if self._drawn else text)
        self.stream.flush()
        self._drawn = True


def translation_progress(total_nodes: int, enabled: bool | None = None) -> ProgressBar:
    """The bar for translating ``total_nodes`` FX nodes; call ``advance()`` once per node.

    Shown only on a terminal (or with ``enabled=True``) and only for graphs large enough
    to take a while, so small exports stay quiet.
    """
    if enabled is None and total_nodes < 500:
        enabled = False
    return ProgressBar("Translating", total_nodes, unit="nodes", enabled=enabled)
