"""``onnx-export diagnostics R.sarif``: a SARIF report's results by rule and level."""

from __future__ import annotations

import argparse
import pathlib

from onnx_export.cli._common import Subcommands, add_command, existing_file

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``diagnostics R.sarif``."""
    parser = add_command(
        commands,
        "diagnostics",
        help="summarize a SARIF report: results by rule and level, with file:line",
        description="Print a SARIF report's results grouped by rule and level, each with its "
        "file:line location and message. Needs no torch. Exits 1 when the report has "
        "errors, 2 when it cannot be read.",
        handler=_run,
    )
    parser.add_argument("report", type=pathlib.Path, metavar="R.sarif", help="the report")


def _run(args: argparse.Namespace) -> int:
    from onnx_export import diagnostics

    report = existing_file(args.report, "the report")
    return diagnostics.main([str(report)], prog="onnx-export diagnostics")
