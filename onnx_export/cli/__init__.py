"""The ``onnx-export`` command line (also ``python -m onnx_export``).

Commands: ``export``, ``verify``, ``run``, ``info``, ``diagnostics``, ``doctor`` (alias
``env``) and ``demo``; ``onnx-export COMMAND --help`` describes each. Exit codes: 0 success,
1 the work failed (export error, mismatch, a run that raises), 2 the command line cannot be
acted on (bad option, missing file, a ``MODULE:FACTORY`` that cannot be imported). Errors
are printed as one message, without a traceback.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from onnx_export._cli_common import CommandError
from onnx_export._cli_export import add_export_command, add_verify_command
from onnx_export._cli_info import add_info_command
from onnx_export._cli_run import add_run_command

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-export",
        description="Export PyTorch models to ONNX with torch.export and onnxscript's torchlib.",
        epilog="Exit codes: 0 success, 1 failure, 2 usage error. "
        "Run `onnx-export COMMAND --help` for a command's options.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_export_command(commands)
    add_verify_command(commands)
    add_run_command(commands)
    add_info_command(commands)
    commands.add_parser(
        "diagnostics",
        help="summarize a SARIF report: results by rule and level, with file:line",
        description="Print a SARIF report's results grouped by rule and level, each with its "
        "file:line location and message. Exits 1 when the report has errors, 2 when it "
        "cannot be read.",
        add_help=False,
    ).add_argument("rest", nargs=argparse.REMAINDER)
    doctor = commands.add_parser(
        "doctor",
        aliases=["env"],
        help="print the installed versions and whether export works here",
        description="Print the versions of torch, onnxscript, onnx-ir, onnx and onnxruntime, "
        "ONNX Runtime's execution providers, and whether export is supported here. "
        "Exits 1 when it is not.",
    )
    doctor.set_defaults(handler=_run_doctor)
    demo = commands.add_parser(
        "demo",
        help="export a small built-in model, run it in ONNX Runtime and compare with PyTorch",
        description="Export a small built-in attention model with dynamic batch and sequence "
        "dims, save it, run it in ONNX Runtime at three sizes and compare with PyTorch.",
    )
    demo.add_argument(
        "-o",
        "--output",
        type=pathlib.Path,
        default=pathlib.Path("m.onnx"),
        help="where to write the model (default: m.onnx)",
    )
    demo.set_defaults(handler=_run_demo)
    return parser


def _run_doctor(args: argparse.Namespace) -> int:
    from onnx_export._environment import check_environment

    report = check_environment()
    print(report)
    return 0 if report.export_supported else 1


def _run_demo(args: argparse.Namespace) -> int:
    from onnx_export._demo import run_demo

    return run_demo(args.output)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Args:
        argv: The arguments after the program name; ``None`` reads ``sys.argv``.

    Returns:
        0 on success, 1 when the work failed, 2 when the command line cannot be used.

    Example:
        >>> from onnx_export.cli import main
        >>> main(["info", "no-such-model.onnx"])
        2
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["diagnostics"]:  # the diagnostics package owns this command's arguments
        from onnx_export import diagnostics

        return diagnostics.main(argv[1:], prog="onnx-export diagnostics")
    parser = _parser()
    args = parser.parse_args(argv)
    prog = f"onnx-export {args.command}"
    try:
        with warnings.catch_warnings():
            warnings.showwarning = functools.partial(_show_warning, prog)
            return int(args.handler(args))
    except CommandError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


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
    print(f"{prog}: warning: {message}", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
