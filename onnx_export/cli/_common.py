"""What every command of the command line shares: errors, exit codes, parser, status line.

Exit codes: 0 success; 1 the work was done and failed (export error, mismatch, a model
that raises); 2 the command line or an input file cannot be used (bad option, missing,
empty or unreadable file, an output path that cannot be written, a ``MODULE:FACTORY`` that
cannot be imported or called, the ``export`` extra not installed). Every error is one line
on stderr; ``--verbose`` adds the details (tracebacks, torch's logs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TextIO

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXPORT_EXTRA",
    "Subcommands",
    "Handler",
    "CommandError",
    "UsageError",
    "OneLineParser",
    "Status",
    "add_command",
    "existing_file",
    "writable_output",
    "writable_folder",
    "require_extra",
    "require_export_extra",
    "one_line",
    "quiet_stderr",
    "from_onnxruntime",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2
#: What ``pip`` installs for the commands that need torch.
EXPORT_EXTRA = "pip install 'onnx-export[export]'"
_EXPORT_MODULES = ("torch", "onnxscript", "onnx_ir")
#: The modules each extra installs, as imported.
_EXTRA_MODULES = {
    "export": _EXPORT_MODULES,
    "hf": (*_EXPORT_MODULES, "transformers", "safetensors"),
}
_PIP_NAMES = {"onnx_ir": "onnx-ir"}

Subcommands = Any  # what ArgumentParser.add_subparsers returns (argparse's private class)
#: A command's handler: the parsed arguments -> the exit code.
Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A command failed; its message is printed as one line, exit code 1."""

    exit_code = EXIT_FAILURE


class UsageError(CommandError):
    """The command line or an input file cannot be used; exit code 2."""

    exit_code = EXIT_USAGE


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line: ``prog: error: ... (see --help)``."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line on stderr and exit with code 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} -h)\n")


def add_command(
    commands: Subcommands, name: str, *, help: str, description: str, handler: Handler, **kw: Any
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with ``-v/--verbose``; ``handler(args)`` runs it."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=description, **kw
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="on failure, also print the details (traceback, torch's logs)",
    )
    parser.set_defaults(handler=handler)
    return parser


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
    if result.is_dir():
        inside = sorted(p.name for p in result.glob("*.onnx"))[:3]
        hint = (
            f"; name a file in it, e.g. {os.fspath(result / inside[0])!r} (it holds "
            f"{', '.join(inside)})"
            if inside
            else ""
        )
        raise UsageError(f"{what} {os.fspath(path)!r} is a folder, not a file{hint}.")
    if not result.is_file():
        raise UsageError(f"{what} {os.fspath(path)!r} does not exist.")
    if result.stat().st_size == 0:
        raise UsageError(f"{what} {os.fspath(path)!r} is empty (0 bytes).")
    return result


def writable_output(
    path: str | os.PathLike[str], option: str, example: str = "model.onnx"
) -> pathlib.Path:
    """``path`` as a ``Path``; a :class:`UsageError` when a file cannot be written there.

    Checked before any work runs. Missing folders are fine (the writer creates them, as
    ``ONNXProgram.save`` does) when the closest existing one is a writable folder.
    """
    result = pathlib.Path(path)
    if result.is_dir():
        raise UsageError(
            f"{option} {os.fspath(path)!r} is a folder; give a file name, "
            f"e.g. {os.fspath(result / example)!r}."
        )
    _check_folder_can_hold(result, option, path)
    return result


def writable_folder(path: str | os.PathLike[str], option: str) -> pathlib.Path:
    """``path`` as a ``Path``; a :class:`UsageError` when a folder cannot be written there.

    The folder is written beside itself and renamed into place, so the closest existing
    folder above it must be writable (missing folders are created).
    """
    result = pathlib.Path(path)
    if result.exists() and not result.is_dir():
        raise UsageError(
            f"{option} {os.fspath(path)!r} is a file; give a folder to write (it is created "
            "if missing)."
        )
    _check_folder_can_hold(result, option, path)
    return result


def _check_folder_can_hold(result: pathlib.Path, option: str, path: str | os.PathLike[str]) -> None:
    """The closest existing folder above ``result`` is a writable folder (not a file)."""
    folder = result.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(
            f"{option} {os.fspath(path)!r}: {os.fspath(folder)!r} is a file, not a folder, so "
            "nothing can be written under it."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"{option} {os.fspath(path)!r}: the folder {os.fspath(folder)!r} is not writable."
        )
    _probe(folder, option, path)


def _probe(folder: pathlib.Path, option: str, path: str | os.PathLike[str]) -> None:
    """Create and remove a file in ``folder``: permission bits do not tell everything.

    Root passes every ``os.access`` check, and a read-only mount, ``/proc`` or a full disk
    refuse files all the same; the writer would fail only after the work.
    """
    import tempfile

    try:
        handle, name = tempfile.mkstemp(prefix=".onnx-export-probe-", dir=folder)
    except OSError as e:
        raise UsageError(
            f"{option} {os.fspath(path)!r}: no file can be created in {os.fspath(folder)!r} "
            f"({e.strerror or e}); choose another path."
        ) from e
    os.close(handle)
    os.unlink(name)


def require_extra(command: str, extra: str = "export") -> None:
    """A :class:`UsageError` naming ``extra`` when a module it installs cannot be imported.

    Args:
        command: The command that needs them (``"export"``, ``"hf"``...).
        extra: ``"export"`` (torch, onnxscript, onnx-ir) or ``"hf"`` (those and transformers,
            safetensors): the extra that installs everything the command needs.
    """
    modules = _EXTRA_MODULES[extra]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            names = ", ".join(_PIP_NAMES.get(m, m) for m in modules)
            torch_first = ""
            if module == "torch":
                from onnx_export._environment import TORCH_INSTALL

                torch_first = f" (torch's CPU build first: {TORCH_INSTALL})"
            raise UsageError(
                f"`onnx-export {command}` needs {names} ({module} cannot be imported: "
                f"{one_line(str(e))}); install them with pip install "
                f"'onnx-export[{extra}]'{torch_first}."
            ) from e


def require_export_extra(command: str) -> None:
    """A :class:`UsageError` naming the ``export`` extra when torch & co. cannot be imported."""
    require_extra(command, "export")


def one_line(text: str, limit: int = 600) -> str:
    """``text`` on one line (lines joined with ``"; "`` or spaces), at most ``limit`` chars."""
    parts = [p.strip().removeprefix("- ") for p in str(text).splitlines() if p.strip()]
    joined = ""
    for part in parts:
        if not joined:
            joined = part
        elif joined.endswith((":", ";", ",", ".")):
            joined += " " + part
        else:
            joined += "; " + part
    return joined if len(joined) <= limit else _cut(joined, limit)


def _cut(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` chars at a sentence end, else between words."""
    head = text[: limit - 4]
    sentence = max(head.rfind(". "), head.rfind("; "), head.rfind(": "))
    if sentence >= limit // 2:
        return head[: sentence + 1] + " ..."
    space = head.rfind(" ")
    return (head[:space] if space >= limit // 2 else head).rstrip() + " ..."


def from_onnxruntime(error: BaseException) -> bool:
    """Whether ONNX Runtime raised ``error`` (its exceptions derive from ``Exception`` only)."""
    return type(error).__module__.startswith("onnxruntime")


@contextlib.contextmanager
def quiet_stderr(verbose: bool) -> Iterator[None]:
    """Send everything written to stderr (torch's logs, graph dumps) nowhere for the block.

    Both Python's ``sys.stderr`` and file descriptor 2 (C++ logs) are redirected to a
    temporary file that is dropped afterwards; with ``verbose`` nothing is redirected.
    """
    if verbose:
        yield
        return
    import tempfile

    sys.stderr.flush()
    saved_fd = os.dup(2)
    saved_stream = sys.stderr
    with tempfile.TemporaryFile(mode="w+") as sink:
        os.dup2(sink.fileno(), 2)
        sys.stderr = sink
        try:
            yield
        finally:
            sink.flush()
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
