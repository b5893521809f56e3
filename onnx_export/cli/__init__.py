"""The ``onnx-export`` command line (also ``python -m onnx_export``).

One module per command in this package, each with a ``register(commands)`` that adds its
subcommand; ``_COMMANDS`` below lists them in the order ``--help`` shows them. Commands:
``export``, ``verify``, ``run``, ``info``, ``diagnostics``, ``doctor`` (alias ``env``),
``triton``, ``serve`` and ``demo``; ``onnx-export COMMAND --help`` describes each.

Exit codes: 0 success; 1 the work failed (export error, mismatch, a run that raises); 2 the
command line or an input file cannot be used (bad option or number, missing, empty or
unreadable file, an output that cannot be written, a ``MODULE:FACTORY`` that cannot be
imported or called, or the ``export`` extra missing for ``export``, ``verify``, ``demo``).
Every error is one line on stderr, without a traceback; ``-v``/``--verbose`` (before or
after the command name) adds the details and lets torch's logs through. ``--version`` prints
the version; a mistyped command gets a "did you mean". ``run``, ``info``, ``diagnostics`` and
``doctor`` need no torch.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import TextIO

from onnx_export.cli._common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CommandError,
    OneLineParser,
    one_line,
)

__all__ = ["main"]

#: The command modules of this package, in the order ``onnx-export --help`` lists them.
_COMMANDS = (
    "export",
    "hf",
    "generate",
    "verify",
    "run",
    "info",
    "diagnostics",
    "doctor",
    "triton",
    "serve",
    "demo",
)


def _parser() -> OneLineParser:
    from onnx_export import __version__

    parser = OneLineParser(
        prog="onnx-export",
        description="Export PyTorch models to ONNX with torch.export and onnxscript's torchlib.",
        epilog="Exit codes: 0 success, 1 the work failed, 2 the command line or an input "
        "file cannot be used. Run `onnx-export COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"onnx-export {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        dest="global_verbose",  # the command's own -v would overwrite a shared dest
        help="on failure, also print the details (traceback, torch's logs); also accepted "
        "after the command name",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(commands)
    return parser


def _command_names(parser: argparse.ArgumentParser) -> list[str]:
    """The commands and aliases the parser knows."""
    for action in parser._actions:  # argparse has no public accessor for subparsers
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def _unknown_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """``error: ...; did you mean ...?`` when the first word is not a command, else None."""
    word = next((a for a in argv if not a.startswith("-")), None)
    names = _command_names(parser)
    if word is None or word in names:
        return None
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; the commands are {', '.join(names)}"
    return f"onnx-export: error: unknown command {word!r}{hint} (see onnx-export -h)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Args:
        argv: The arguments after the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 on success, 1 when the work failed, 2 when the command line or an input file
        cannot be used.

    Example:
        >>> from onnx_export.cli import main
        >>> main(["info", "no-such-model.onnx"])
        2
    """
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    return args if isinstance(args, int) else _run(args)


def _parse(argv: list[str]) -> argparse.Namespace | int:
    """The parsed command line, or the exit code when it is help or a usage error."""
    parser = _parser()
    mistyped = _unknown_command(parser, argv)
    if mistyped is not None:
        print(mistyped, file=sys.stderr)
        return EXIT_USAGE
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as exit_request:  # --help (0) or a usage error (2, already printed)
        return exit_request.code if isinstance(exit_request.code, int) else EXIT_USAGE
    if unknown:
        prog = f"onnx-export {args.command}"
        message = f"unrecognized arguments: {' '.join(unknown)} (see {prog} -h)"
        print(f"{prog}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    args.verbose = bool(getattr(args, "verbose", False) or args.global_verbose)
    return args


def _run(args: argparse.Namespace) -> int:
    """Run the command's handler; every error becomes one line and an exit code."""
    prog = f"onnx-export {args.command}"
    verbose = bool(getattr(args, "verbose", False))
    try:
        with warnings.catch_warnings(), _logs_shown(verbose):
            warnings.showwarning = functools.partial(_show_warning, prog)
            return int(args.handler(args))
    except CommandError as e:
        print(f"{prog}: error: {e if verbose else one_line(str(e), 2000)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `onnx-export info m.onnx | head`: the reader has gone
        _silence_stdout()
        return EXIT_FAILURE
    except Exception as e:  # a bug of ours or an error nobody anticipated
        if verbose:
            traceback.print_exc()
        print(
            f"{prog}: error: unexpected {type(e).__name__}: {one_line(str(e), 300)} "
            f"(run with --verbose for the traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_FAILURE


@contextlib.contextmanager
def _logs_shown(verbose: bool) -> Iterator[None]:
    """With ``verbose``, the ``onnx_export`` logger at INFO: the export shows torch's logs."""
    logger = logging.getLogger("onnx_export")
    saved = logger.level
    if verbose:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.setLevel(saved)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's exit flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (captured in a test)
        pass
    finally:
        os.close(devnull)


def _show_warning(
    prog: str,
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Print a warning as one line, ``onnx-export run: warning: ...``, without source."""
    print(f"{prog}: warning: {one_line(str(message))}", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
