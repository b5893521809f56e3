"""``onnx-export demo``: export a small built-in model, run it in ONNX Runtime, compare."""

from __future__ import annotations

import argparse
import pathlib

from onnx_export.cli._common import (
    Subcommands,
    add_command,
    require_export_extra,
    writable_output,
)

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``demo [-o m.onnx]``."""
    parser = add_command(
        commands,
        "demo",
        help="export a small built-in model, run it in ONNX Runtime and compare with "
        "PyTorch; writes m.onnx and m.sarif in the current folder",
        description="Export a small built-in attention model with dynamic batch and sequence "
        "dims, save it, run it in ONNX Runtime at three sizes and compare with PyTorch. "
        "It writes m.onnx and m.sarif in the current folder: the model and its diagnostics "
        "report (-o names the model; the report goes beside it, with the suffix .sarif). "
        "Exits 1 on a mismatch, 2 when the 'export' extra (torch) is not installed or the "
        "output cannot be written.",
        handler=_run,
    )
    parser.add_argument(
        "-o",
        "--output",
        type=pathlib.Path,
        default=pathlib.Path("m.onnx"),
        help="where to write the model (default: m.onnx in the current folder; the SARIF "
        "report goes beside it, m.sarif)",
    )


def _run(args: argparse.Namespace) -> int:
    require_export_extra("demo")
    output = writable_output(args.output, "-o/--output")
    writable_output(output.with_suffix(".sarif"), "the report")
    from onnx_export.cli._demo_model import run_demo

    return run_demo(output, verbose=args.verbose)
