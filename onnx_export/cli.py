"""The ``onnx-export`` command line (also ``python -m onnx_export``)."""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-export",
        description="Export PyTorch models to ONNX with torch.export and onnxscript's torchlib.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
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
    report = commands.add_parser(
        "diagnostics",
        help="summarize a SARIF report: results by rule and level, with file:line",
        description="Print a SARIF report's results grouped by rule and level, each with its "
        "file:line location and message. Exits 1 when the report has errors, 2 when it "
        "cannot be read.",
        add_help=False,
    )
    report.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Example:
        >>> from onnx_export.cli import main
        >>> main(["demo", "--help"])  # doctest: +SKIP
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["diagnostics"]:  # the diagnostics package owns this command's arguments
        import diagnostics

        return diagnostics.main(argv[1:], prog="onnx-export diagnostics")
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from onnx_export._demo import run_demo

        return run_demo(args.output)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
