"""``onnx-export doctor`` (alias ``env``): the installed versions and whether export works."""

from __future__ import annotations

import argparse

from onnx_export.cli._common import Subcommands, add_command

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``doctor`` and its alias ``env``."""
    add_command(
        commands,
        "doctor",
        aliases=["env"],
        help="print the installed versions and whether export works here",
        description="Print the versions of torch, onnxscript, onnx-ir, onnx and onnxruntime, "
        "ONNX Runtime's execution providers, and whether export is supported here. Needs no "
        "torch. Exits 1 when export is not supported (for example without the 'export' "
        "extra: pip install 'onnx-export[export]').",
        handler=_run,
    )


def _run(args: argparse.Namespace) -> int:
    from onnx_export._environment import check_environment

    report = check_environment()
    print(report)
    return 0 if report.export_supported else 1
