"""``onnx-export doctor`` (alias ``env``): the installed versions and whether export works."""

from __future__ import annotations

import argparse

from onnx_export.cli._common import EXPORT_EXTRA, CommandError, Subcommands, add_command

__all__ = ["patch_table", "register"]


def register(commands: Subcommands) -> None:
    """Add ``doctor`` and its alias ``env``."""
    add_command(
        commands,
        "doctor",
        aliases=["env"],
        help="print the installed versions and whether export works here",
        description="Print the versions of torch, onnxscript, onnx-ir, onnx and onnxruntime, "
        "ONNX Runtime's execution providers, and whether export is supported here; where it "
        "is, the patches capture applies to library code, each with the installed release of "
        "its library and whether its targets are found. Needs no torch. Exits 1 when export "
        "is not supported (for example without the 'export' extra: pip install "
        "'onnx-export[export]').",
        handler=_run,
    )


def _run(args: argparse.Namespace) -> int:
    from onnx_export._environment import TORCH_INSTALL, check_environment

    report = check_environment()
    print(report)
    if report.export_supported:
        print(patch_table())
    if not report.export_supported:
        torch_first = "" if report.torch else f"`{TORCH_INSTALL}` (torch's CPU build), then "
        raise CommandError(
            f"export is not supported here ({len(report.problems)} problem(s) above); "
            f"{torch_first}`{EXPORT_EXTRA}` installs what it needs, and run, info and "
            "diagnostics work as is."
        )
    return 0


def patch_table() -> str:
    """The capture patches: each with its libraries' installed releases and its targets' state.

    Imports the libraries the patches target (transformers too, where it is installed), so
    that every target is looked up.

    Example:
        >>> print(patch_table())  # doctest: +ELLIPSIS
        Capture patches (onnx_export/capture/patches/): 20, ...
    """
    from onnx_export.capture.patches import PATCHES, library_version, locate

    rows: list[tuple[str, str, str, str]] = []
    for patch in PATCHES:
        versions = ", ".join(f"{lib} {library_version(lib) or '-'}" for lib in patch.libraries)
        states = [locate(t, import_library=True) for t in patch.targets]
        problems = [text for state, text in states if state not in ("found", "other version")]
        if problems:
            state = "; ".join(problems)
        elif all(s == "other version" for s, _ in states):
            state = "not for this release: " + "; ".join(text for _, text in states)
        else:
            state = "all targets found"
        rows.append((patch.name, versions, state, ", ".join(patch.tested)))
    found = sum(1 for row in rows if row[2] == "all targets found")
    other = sum(1 for row in rows if row[2].startswith("not for"))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [
        f"Capture patches (onnx_export/capture/patches/): {len(rows)}, "
        f"{found} with every target found, {other} not for this release, "
        f"{len(rows) - found - other} with a target missing or changed (skipped)"
    ]
    for name, versions, state, tested in rows:
        lines.append(f"  {name:<{widths[0]}}  {versions:<{widths[1]}}  {state} (tested: {tested})")
    return "\n".join(lines)
