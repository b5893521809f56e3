"""``onnx-export doctor`` (alias ``env``): the installed versions and whether export works."""

from __future__ import annotations

import argparse

from onnx_export.cli._common import EXPORT_EXTRA, CommandError, Subcommands, add_command

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
    from onnx_export._environment import TORCH_INSTALL, check_environment

    report = check_environment()
    print(report)
    if not report.export_supported:
        torch_first = "" if report.torch else f"`{TORCH_INSTALL}` (torch's CPU build), then "
        raise CommandError(
            f"export is not supported here ({len(report.problems)} problem(s) above); "
            f"{torch_first}`{EXPORT_EXTRA}` installs what it needs, and run, info and "
            "diagnostics work as is."
        )
    return 0
