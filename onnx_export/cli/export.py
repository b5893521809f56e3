"""``onnx-export export MODULE:FACTORY -o m.onnx``: a model from a factory, to an .onnx file."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from onnx_export._options import DEFAULT_OPSET, SUPPORTED_OPSETS
from onnx_export.cli._arguments import add_factory_argument
from onnx_export.cli._common import (
    CommandError,
    Status,
    Subcommands,
    UsageError,
    add_command,
    one_line,
    quiet_stderr,
    require_export_extra,
    writable_output,
)
from onnx_export.cli._factory import ModelCall, call_factory, load_registry, parse_dynamic

if TYPE_CHECKING:
    from onnx_export._options import ExportOptions
    from onnx_export.program._program import ONNXProgram

__all__ = ["register", "export_quietly", "describe_export_error"]


def register(commands: Subcommands) -> None:
    """Add ``export MODULE:FACTORY -o m.onnx [options]``."""
    parser = add_command(
        commands,
        "export",
        help="export a model from a Python factory to an .onnx file",
        description="Export the model that FACTORY returns, called with the example inputs "
        "it returns, and save it. Exits 1 when the export fails (the message names the "
        "SARIF report), 2 when the command line cannot be used or the 'export' extra "
        "(torch) is not installed.",
        handler=_run,
    )
    add_factory_argument(parser)
    parser.add_argument(
        "-o", "--output", type=pathlib.Path, required=True, help="where to write the model"
    )
    parser.add_argument(
        "--dynamic",
        metavar="NAME:AXIS=DIM",
        action="append",
        default=[],
        help="make axis AXIS of forward's input NAME a symbolic dimension named DIM; "
        "repeat for more (equal DIM names are the same dimension)",
    )
    parser.add_argument(
        "--opset",
        type=int,
        default=None,
        metavar="N",
        help=f"ONNX opset, {SUPPORTED_OPSETS.start} to {SUPPORTED_OPSETS.stop - 1} "
        f"(default {DEFAULT_OPSET})",
    )
    parser.add_argument(
        "--report",
        type=pathlib.Path,
        metavar="R.sarif",
        help="always write the SARIF diagnostics report here (by default a report is "
        "written only when the export fails, to a temporary file the error names)",
    )
    parser.add_argument("--no-optimize", action="store_true", help="skip onnxscript's optimizer")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the parity check: by default a model with at most 64 MB of weights is run "
        "in ONNX Runtime and in eager PyTorch (eval mode, no grad) on the example inputs, and "
        "a mismatch is a 'warning:' line naming the first diverging node",
    )
    parser.add_argument(
        "--allow-static",
        action="store_true",
        help="when the model's code fixes the size of a --dynamic dimension, export it static "
        "with a warning (one stderr line per dimension) instead of failing",
    )
    parser.add_argument(
        "--registry",
        metavar="MODULE:NAME",
        help="your ONNX functions for custom ops: an onnx_export.OnnxRegistry in MODULE (a "
        "module name or a .py path), or a function of no arguments that returns one after "
        "OnnxRegistry.register_op for each op; what ExportOptions(onnx_registry=...) takes",
    )
    parser.add_argument(
        "--target",
        choices=("onnx", "onnxruntime"),
        default="onnx",
        help="onnx (default): standard ONNX ops, for any runtime; onnxruntime: also ONNX "
        "Runtime's fused com.microsoft ops, as ExportOptions(target=...)",
    )


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    output = writable_output(args.output, "-o/--output")  # before torch's import (seconds)
    if args.report is not None:
        writable_output(args.report, "--report")
    require_export_extra("export")
    options = _export_options(args)
    status = Status()
    if args.registry is not None:
        with status(f"Importing {args.registry}"):
            registry = load_registry(args.registry)
        options = dataclasses.replace(options, onnx_registry=registry)
    with status(f"Importing {args.factory}"):
        call = call_factory(args.factory)
    name = type(call.model).__name__
    with status(f"Exporting {name}"):
        program = export_quietly(call, options, verbose=args.verbose)
    with status(f"Saving {output}"):
        path = _save(program, output)
    graph = program.model.graph
    echo(
        f"Exported {name} to {path} ({path.stat().st_size / 1024:.1f} KiB, "
        f"{graph.num_nodes()} nodes, opset {graph.opset_imports.get('')}); "
        f"inputs {[f'{v.name}{v.shape}' for v in graph.inputs]}"
    )
    if args.report is not None:
        echo(f"Wrote the SARIF report {args.report}")
    return 0


def export_quietly(
    call: ModelCall, options: ExportOptions | None = None, *, verbose: bool = False
) -> ONNXProgram:
    """``dynamo_export`` with torch's logs silenced (unless ``verbose``); one-line errors.

    Raises:
        UsageError: The example inputs or options do not fit the model (exit code 2).
        CommandError: The export failed (exit code 1); the message names the SARIF report.
    """
    from onnx_export._export import dynamo_export
    from onnx_export.diagnostics import SarifWriteError
    from onnx_export.errors import (
        DimensionNameWarning,
        ExportInputError,
        OnnxExportError,
        ParityWarning,
        ShapeRangeWarning,
        StaticDimensionWarning,
        TrainingModeWarning,
    )

    name = type(call.model).__name__
    ours = (
        StaticDimensionWarning,
        DimensionNameWarning,
        ShapeRangeWarning,
        TrainingModeWarning,
        ParityWarning,
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            for category in ours:
                warnings.simplefilter("always", category)
            with quiet_stderr(verbose):
                program = dynamo_export(
                    call.model, *call.args, export_options=options, **call.kwargs
                )
        for warning in caught:  # one line each (others were silenced with torch's logs)
            if issubclass(warning.category, ours):
                print(f"warning: {one_line(str(warning.message), 1000)}", file=sys.stderr)
        return program
    except SarifWriteError as e:  # checked writable before the export; the disk changed
        raise CommandError(f"exporting {name} worked, but {one_line(str(e))}") from e
    except OnnxExportError as e:
        error = UsageError if isinstance(e, ExportInputError) else CommandError
        report = None
        chosen = getattr(getattr(options, "diagnostic_options", None), "report_path", None)
        if e.report_path is None and chosen is not None and pathlib.Path(chosen).is_file():
            report = pathlib.Path(chosen)  # where --report asked for it
        raise error(describe_export_error(name, e, verbose, report or e.report_path)) from e


#: What the exporter's messages say of the chained torch error; one line has no "below".
_CHAINED = ("torch's error is chained below.", "The last strategy's error is chained below.")


def describe_export_error(name: str, error: Any, verbose: bool, report: Any = None) -> str:
    """``exporting NAME failed: ...`` on one line (all of it with ``verbose``), then the report."""
    message = str(error.args[0]) if error.args else str(error)
    if "OnnxRegistry.register_op" in message:
        message = message.replace(
            "ExportOptions(onnx_registry=...)",
            "ExportOptions(onnx_registry=...) (on the command line: --registry MODULE:NAME)",
        )
        if "--registry" not in message:
            message += " On the command line, pass the registry with --registry MODULE:NAME."
    for chained in _CHAINED:
        cause = getattr(error, "__cause__", None)
        said = f"torch's error: {type(cause).__name__}: {cause}" if cause is not None else ""
        if verbose and said:
            message = message.replace(chained, f"\n{said.strip()}")
        else:  # one line has no "below": say where torch's error is
            message = message.replace(chained, "--verbose prints torch's error.")
    text = message.strip() if verbose else _summary(message)
    where = ""
    if report is not None:
        where = (
            f" The full diagnostic report (SARIF) is at: {report} "
            f"(summarize it with `onnx-export diagnostics {report}`)."
        )
    return f"exporting {name} failed: {text}{where}"


def _summary(message: str) -> str:
    """The message on one line: the cause shortened if need be, the next steps in full."""
    lines = message.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Next steps:")), None)
    if start is None:
        return one_line(message)
    cause, steps = "\n".join(lines[:start]), "\n".join(lines[start:])
    return f"{one_line(cause, 400)} {one_line(steps, 800)}"


def _save(program: ONNXProgram, output: pathlib.Path) -> pathlib.Path:
    from onnx_export.errors import OnnxExportError

    try:
        return program.save(output)
    except OnnxExportError as e:
        raise CommandError(f"saving {output} failed: {one_line(str(e))}") from e
    except OSError as e:
        raise CommandError(f"cannot write {output}: {e.strerror or e}") from e


def _export_options(args: argparse.Namespace) -> ExportOptions:
    from onnx_export._options import DEFAULT_OPSET, SUPPORTED_OPSETS, ExportOptions
    from onnx_export.diagnostics import DiagnosticOptions, Level

    dynamic = parse_dynamic(args.dynamic)
    if args.opset is not None and args.opset not in SUPPORTED_OPSETS:
        raise UsageError(
            f"--opset {args.opset}: the supported opsets are {SUPPORTED_OPSETS.start} to "
            f"{SUPPORTED_OPSETS.stop - 1}."
        )
    diagnostic_options = None
    if args.report is not None:
        diagnostic_options = DiagnosticOptions(  # the notes too, as `demo` writes them
            report_path=args.report, write_report="always", verbosity=Level.NOTE
        )
    return ExportOptions(
        dynamic_shapes=dynamic or None,
        opset_version=args.opset if args.opset is not None else DEFAULT_OPSET,
        optimize=not args.no_optimize,
        diagnostic_options=diagnostic_options,
        allow_static_fallback=getattr(args, "allow_static", False),
        verify=False if getattr(args, "no_verify", False) else None,
        target=getattr(args, "target", "onnx"),
    )
