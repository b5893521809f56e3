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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Example:
        >>> from onnx_export.cli import main
        >>> main(["demo", "--help"])  # doctest: +SKIP
    """
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from onnx_export._demo import run_demo

        return run_demo(args.output)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
