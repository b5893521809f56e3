"""``onnx-export export`` and ``onnx-export verify``: a model from a factory, to ONNX and back."""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from onnx_export._cli_common import (
    CommandError,
    Status,
    Subcommands,
    UsageError,
    existing_file,
    from_onnxruntime,
)
from onnx_export._cli_factory import ModelCall, call_factory, parse_dynamic

if TYPE_CHECKING:
    from onnx_export._options import ExportOptions
    from onnx_export._verify import OutputComparison

__all__ = ["add_export_command", "add_verify_command"]

_FACTORY_HELP = (
    "a module name (imported from the current folder or sys.path) or a path "
    "to a .py file, and a function in it that takes no arguments and returns (model, args) "
    "or (model, args, kwargs)"
)


def add_export_command(commands: Subcommands) -> None:
    """Add ``export MODULE:FACTORY -o m.onnx [options]``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "export",
        help="export a model from a Python factory to an .onnx file",
        description="Export the model that FACTORY returns, called with the example inputs "
        "it returns, and save it. Exits 1 when the export fails (the message names the "
        "SARIF report), 2 when the command line cannot be used.",
    )
    parser.add_argument("factory", metavar="MODULE:FACTORY", help=_FACTORY_HELP)
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
        "--opset", type=int, default=None, metavar="N", help="ONNX opset, 18 (default) to 23"
    )
    parser.add_argument(
        "--report",
        type=pathlib.Path,
        metavar="R.sarif",
        help="always write the SARIF diagnostics report here (by default a report is "
        "written only when the export fails, to a temporary file the error names)",
    )
    parser.add_argument("--no-optimize", action="store_true", help="skip onnxscript's optimizer")
    parser.set_defaults(handler=run_export)


def add_verify_command(commands: Subcommands) -> None:
    """Add ``verify MODULE:FACTORY m.onnx [--rtol R] [--atol A]``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "verify",
        help="compare a saved model in ONNX Runtime with eager PyTorch",
        description="Run the model FACTORY returns in eager PyTorch and the saved model "
        "through onnx_export.load, both on FACTORY's example inputs, and print each "
        "output's largest absolute and relative error. Exits 1 on a mismatch.",
    )
    parser.add_argument("factory", metavar="MODULE:FACTORY", help=_FACTORY_HELP)
    parser.add_argument("model", type=pathlib.Path, metavar="MODEL.onnx", help="the saved model")
    parser.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    parser.add_argument(
        "--provider", choices=("cpu", "cuda"), default="cpu", help="execution provider (cpu)"
    )
    parser.set_defaults(handler=run_verify)


def run_export(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    """Export and save; 0 on success."""
    status = Status()
    options = _export_options(args)
    with status(f"Importing {args.factory}"):
        call = call_factory(args.factory)
    from onnx_export._export import dynamo_export
    from onnx_export.errors import OnnxExportError

    name = type(call.model).__name__
    try:
        with status(f"Exporting {name}"):
            program = dynamo_export(call.model, *call.args, export_options=options, **call.kwargs)
        with status(f"Saving {args.output}"):
            path = program.save(args.output)
    except OnnxExportError as e:
        raise CommandError(f"exporting {name} failed.\n{e}") from e
    graph = program.model.graph
    echo(
        f"Exported {name} to {path} ({path.stat().st_size / 1024:.1f} KiB, "
        f"{graph.num_nodes()} nodes, opset {graph.opset_imports.get('')}); "
        f"inputs {[f'{v.name}{v.shape}' for v in graph.inputs]}"
    )
    if args.report is not None:
        echo(f"Wrote the SARIF report {args.report}")
    return 0


def _export_options(args: argparse.Namespace) -> ExportOptions:
    from onnx_export._options import DEFAULT_OPSET, SUPPORTED_OPSETS, ExportOptions
    from onnx_export.diagnostics import DiagnosticOptions

    dynamic = parse_dynamic(args.dynamic)
    if args.opset is not None and args.opset not in SUPPORTED_OPSETS:
        raise UsageError(
            f"--opset {args.opset}: the supported opsets are {SUPPORTED_OPSETS.start} to "
            f"{SUPPORTED_OPSETS.stop - 1}."
        )
    diagnostic_options = None
    if args.report is not None:
        diagnostic_options = DiagnosticOptions(report_path=args.report, write_report="always")
    return ExportOptions(
        dynamic_shapes=dynamic or None,
        opset_version=args.opset if args.opset is not None else DEFAULT_OPSET,
        optimize=not args.no_optimize,
        diagnostic_options=diagnostic_options,
    )


def run_verify(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    """Compare eager PyTorch with the saved model; 0 when every output is within tolerance."""
    status = Status()
    existing_file(args.model, "the model")
    with status(f"Importing {args.factory}"):
        call = call_factory(args.factory)
    import torch

    from onnx_export.adapters import AdapterError, load

    with status("Running PyTorch"), torch.no_grad():
        expected = _eager(call)
    try:
        with status(f"Running {args.model} in ONNX Runtime"):
            module = load(args.model, providers=[args.provider])
            got = module(*call.args, **call.kwargs)
    except Exception as e:
        if not (isinstance(e, AdapterError) or from_onnxruntime(e)):
            raise
        raise CommandError(f"{args.model} cannot be run on the factory's inputs: {e}") from e
    comparisons = _compare(module.output_names, expected, got, args.rtol, args.atol)
    echo(
        f"PyTorch (eager) vs ONNX Runtime ({module.providers[0]}), rtol={args.rtol}, "
        f"atol={args.atol}:"
    )
    _print_table(comparisons, echo)
    bad = [c.name for c in comparisons if not c.ok]
    if bad:
        raise CommandError(
            f"{len(bad)} of {len(comparisons)} outputs differ beyond tolerance: {bad}. "
            "Export with --report and read the report, or call ONNXProgram.verify in Python "
            "to find the first diverging node."
        )
    echo(f"All {len(comparisons)} outputs match.")
    return 0


def _print_table(comparisons: Sequence[OutputComparison], echo: Callable[[str], None]) -> None:
    width = max(len("output"), *(len(c.name) for c in comparisons))
    echo(f"  {'output':<{width}}  max abs error  max rel error  ok")
    for c in comparisons:
        verdict = "yes" if c.ok else "NO"
        echo(f"  {c.name:<{width}}  {c.max_abs_error:>13.3g}  {c.max_rel_error:>13.3g}  {verdict}")


def _eager(call: ModelCall) -> Any:
    """The model's outputs, on copies of the inputs (a model may change them in place)."""
    from torch.utils import _pytree as pytree

    args, kwargs = pytree.tree_map(_clone, (call.args, dict(call.kwargs)))
    try:
        return call.model(*args, **kwargs)
    except Exception as e:
        raise CommandError(
            f"the model raised in eager PyTorch on the factory's inputs: {type(e).__name__}: {e}"
        ) from e


def _clone(value: Any) -> Any:
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value


def _tensor_leaves(value: Any) -> list[Any]:
    import torch
    from torch.utils import _pytree as pytree

    leaves = [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    return [(torch.view_as_real(t) if t.is_complex() else t).detach().cpu().numpy() for t in leaves]


def _compare(
    names: list[str], expected: Any, got: Any, rtol: float, atol: float
) -> tuple[OutputComparison, ...]:
    from onnx_export._verify import compare

    want, have = _tensor_leaves(expected), _tensor_leaves(got)
    if len(want) != len(have):
        raise CommandError(
            f"PyTorch returned {len(want)} tensors, the ONNX model {len(have)}: the model "
            "file does not come from this factory's model."
        )
    labels = names if len(names) == len(want) else [f"output {i}" for i in range(len(want))]
    return compare(labels, want, have, rtol, atol)
