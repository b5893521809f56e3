"""``onnx-export verify MODULE:FACTORY m.onnx``: a saved model against eager PyTorch."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from onnx_export.cli._arguments import (
    add_factory_argument,
    add_model_argument,
    add_provider_option,
    add_tolerance_options,
    add_upcast_option,
    load_hint,
)
from onnx_export.cli._common import (
    CommandError,
    Status,
    Subcommands,
    UsageError,
    add_command,
    existing_file,
    from_onnxruntime,
    one_line,
    require_export_extra,
)
from onnx_export.cli._factory import ModelCall, call_factory

if TYPE_CHECKING:
    from onnx_export.program._verify import OutputComparison

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``verify MODULE:FACTORY m.onnx [--rtol R] [--atol A] [--provider P]``."""
    parser = add_command(
        commands,
        "verify",
        help="compare a saved model in ONNX Runtime with eager PyTorch",
        description="Run the model FACTORY returns in eager PyTorch, as it is deployed (eval "
        "mode, under torch.no_grad(); its training flags are put back after), and the saved "
        "model through onnx_export.load, both on FACTORY's example inputs, and print each "
        "output's largest absolute and relative error. Exits 1 on a mismatch or when the "
        "model cannot run on the inputs, 2 when the command line, the model file or the "
        "factory cannot be used or the 'export' extra (torch) is not installed.",
        handler=_run,
    )
    add_factory_argument(parser)
    add_model_argument(parser, "the saved model")
    add_tolerance_options(parser)
    add_provider_option(parser)
    add_upcast_option(parser)


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    require_export_extra("verify")
    path = existing_file(args.model, "the model")
    module = _load(path, args.provider, args.upcast)
    status = Status()
    with status(f"Importing {args.factory}"):
        call = call_factory(args.factory)
    import torch

    from onnx_export.adapters import AdapterError
    from onnx_export.program._modes import modules_in_training

    training = modules_in_training(call.model) if isinstance(call.model, torch.nn.Module) else []
    if training:
        print(
            "warning: the factory's model is in training mode "
            f"({', '.join(training[:3])}); it is compared in eval mode, as it is deployed, "
            "so a file exported in training mode differs.",
            file=sys.stderr,
        )
    with status("Running PyTorch (eval mode, no grad)"):
        expected = _eager(call)
    try:
        with status(f"Running {path} in ONNX Runtime"):
            got = module(*call.args, **call.kwargs)
    except Exception as e:
        if not (isinstance(e, AdapterError) or from_onnxruntime(e)):
            raise
        raise CommandError(f"{path} cannot run on the factory's inputs: {one_line(str(e))}") from e
    comparisons = _compare(module.output_names, expected, got, args.rtol, args.atol)
    echo(
        f"PyTorch (eager, eval mode, no grad) vs ONNX Runtime ({module.providers[0]}), "
        f"rtol={args.rtol}, atol={args.atol}:"
    )
    _print_table(comparisons, echo)
    bad = [c.name for c in comparisons if not c.ok]
    if bad:
        other = _other_weights(path, call.model)
        if other:
            raise CommandError(
                f"{len(bad)} of {len(comparisons)} outputs differ beyond tolerance: {bad}, "
                f"and the factory's model has other weights than {path} ({_names(other)}), as "
                "when the factory builds its model with new random weights on each call or the "
                "file was exported from another model. Make the factory return the same "
                "weights every time (torch.manual_seed(0) before building the model, or load a "
                "checkpoint), then export and verify again."
            )
        raise CommandError(
            f"{len(bad)} of {len(comparisons)} outputs differ beyond tolerance: {bad}. "
            "Export with --report and read the report, or call ONNXProgram.verify in Python "
            "to find the first diverging node."
        )
    echo(f"All {len(comparisons)} outputs match.")
    return 0


def _other_weights(path: Any, model: Any) -> list[str]:
    """The state_dict entries whose values differ from the file's initializer of that name.

    Only initializers named exactly as a ``state_dict`` entry, of the same shape and dtype,
    are compared (weights the optimizer folded or transposed are not); a file that cannot
    be read again gives an empty list, and the plain mismatch message stands.
    """
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    if not isinstance(model, torch.nn.Module):
        return []
    state = model.state_dict(keep_vars=False)
    try:
        proto = onnx.load(str(path))
    except Exception:  # protobuf's DecodeError, OSError, onnx's own errors
        return []
    other = []
    for initializer in proto.graph.initializer:
        tensor = state.get(initializer.name)
        if tensor is None or tensor.is_complex() or tensor.dtype == torch.bfloat16:
            continue
        try:
            saved = numpy_helper.to_array(initializer)
        except (OSError, ValueError, TypeError):
            continue
        current = tensor.detach().cpu().numpy()
        if saved.shape != current.shape or saved.dtype != current.dtype:
            continue
        if not np.array_equal(saved, current, equal_nan=saved.dtype.kind in "fc"):
            other.append(initializer.name)
    return other


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _load(path: Any, provider: str, upcast: list[str]) -> Any:
    """The model through ``onnx_export.load``; a file it cannot load is unusable (exit 2)."""
    from onnx_export.adapters import AdapterError, load

    try:
        with Status()(f"Loading {path}"):
            return load(path, providers=[provider], upcast=upcast)
    except Exception as e:
        if not (isinstance(e, AdapterError | OSError | ValueError) or from_onnxruntime(e)):
            raise
        reason = load_hint(one_line(str(e)))
        raise UsageError(f"cannot load {path} as an ONNX model: {reason}") from e


def _print_table(comparisons: Sequence[OutputComparison], echo: Callable[[str], None]) -> None:
    width = max(len("output"), *(len(c.name) for c in comparisons))
    echo(f"  {'output':<{width}}  max abs error  max rel error  ok")
    for c in comparisons:
        verdict = "yes" if c.ok else "NO"
        echo(f"  {c.name:<{width}}  {c.max_abs_error:>13.3g}  {c.max_rel_error:>13.3g}  {verdict}")


def _eager(call: ModelCall) -> Any:
    """The model's outputs as deployed (eval, no grad), on copies of the inputs."""
    import torch
    from torch.utils import _pytree as pytree

    from onnx_export.program._modes import run_deployed

    try:
        if isinstance(call.model, torch.nn.Module):
            return run_deployed(call.model, tuple(call.args), dict(call.kwargs))
        args, kwargs = pytree.tree_map(_clone, (call.args, dict(call.kwargs)))
        with torch.no_grad():
            return call.model(*args, **kwargs)
    except Exception as e:
        raise CommandError(
            f"the model raised in eager PyTorch on the factory's inputs: {type(e).__name__}: "
            f"{one_line(str(e))}"
        ) from e


def _clone(value: Any) -> Any:
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value


def _tensor_leaves(value: Any) -> list[Any]:
    import torch
    from torch.utils import _pytree as pytree

    leaves = [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    return [_numpy(t) for t in leaves]


def _numpy(tensor: Any) -> Any:
    """A numpy array of ``tensor``; complex as real pairs, dtypes numpy lacks as float32."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.dtype in (torch.bfloat16, *_float8_dtypes()):
        tensor = tensor.float()
    return tensor.numpy()


def _float8_dtypes() -> tuple[Any, ...]:
    import torch

    names = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    return tuple(getattr(torch, n) for n in names if hasattr(torch, n))


def _compare(
    names: list[str], expected: Any, got: Any, rtol: float, atol: float
) -> tuple[OutputComparison, ...]:
    from onnx_export.program._verify import compare

    want, have = _tensor_leaves(expected), _tensor_leaves(got)
    if len(want) != len(have):
        raise CommandError(
            f"PyTorch returned {len(want)} tensors, the ONNX model {len(have)}: the model "
            "file does not come from this factory's model."
        )
    labels = names if len(names) == len(want) else [f"output {i}" for i in range(len(want))]
    return compare(labels, want, have, rtol, atol)
