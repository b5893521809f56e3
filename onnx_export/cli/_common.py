"""What every command of the command line shares: its errors, exit codes and status line.

Exit codes: 0 success; 1 the work was done and failed (export error, mismatch, a model
that raises); 2 the command line cannot be acted on (bad option, missing or unreadable
file, a ``MODULE:FACTORY`` that cannot be imported or called).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "Subcommands",
    "CommandError",
    "UsageError",
    "Status",
    "existing_file",
    "from_onnxruntime",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2

Subcommands = Any  # what ArgumentParser.add_subparsers returns (argparse's private class)


class CommandError(Exception):
    """A command failed; its message is printed without a traceback, exit code 1."""

    exit_code = EXIT_FAILURE


class UsageError(CommandError):
    """The command line cannot be acted on; exit code 2."""

    exit_code = EXIT_USAGE


class Status:
    """A one-line status (``Exporting ...``) on stderr, shown only when it is a terminal.

    Args:
        stream: Where to write; defaults to ``sys.stderr`` at the time of each call.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    @property
    def _out(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _live(self) -> bool:
        isatty = getattr(self._out, "isatty", None)
        return bool(isatty and isatty())

    @contextlib.contextmanager
    def __call__(self, message: str) -> Iterator[None]:
        """Show ``message ...`` while the block runs; erase it afterwards."""
        live = self._live()
        if live:
            self._out.write(f"\r{message} ...\x1b[K")
            self._out.flush()
        try:
            yield
        finally:
            if live:
                self._out.write("\r\x1b[K")
                self._out.flush()


def existing_file(path: str | os.PathLike[str], what: str) -> pathlib.Path:
    """``path`` as a ``Path``; a :class:`UsageError` naming ``what`` when it is no file."""
    result = pathlib.Path(path)
    if not result.is_file():
        reason = "is a folder" if result.is_dir() else "does not exist"
        raise UsageError(f"{what} {os.fspath(path)!r} {reason}.")
    return result


def from_onnxruntime(error: BaseException) -> bool:
    """Whether ONNX Runtime raised ``error`` (its exceptions derive from ``Exception`` only)."""
    return type(error).__module__.startswith("onnxruntime")
