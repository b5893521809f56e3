"""``dynamo_export``: capture -> decompose -> translate -> optimize -> ``ONNXProgram``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument

from onnx_export._capture import CaptureAttempt, capture
from onnx_export._decomp import decompose
from onnx_export._naming import (
    canonical_inputs,
    dim_names_from_program,
    leaf_paths,
    output_paths,
    to_torch_dynamic_shapes,
)
from onnx_export._optimize import convert_opset, optimize_model
from onnx_export._options import ExportOptions
from onnx_export._program import ONNXProgram
from onnx_export._registry import OnnxRegistry
from onnx_export._translate import UnsupportedNode, find_unsupported, translate
from onnx_export.errors import (
    CaptureError,
    ConversionError,
    OptimizationError,
    UnsupportedOpsError,
)

__all__ = ["dynamo_export"]


class _FunctionModule(torch.nn.Module):
    """Wraps a plain function so torch.export can capture it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        self.forward.__func__.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _capture_error(attempts: Sequence[CaptureAttempt]) -> CaptureError:
    lines = "\n".join(f"  - {a.summary()}" for a in attempts)
    last = attempts[-1].exception
    return (
        CaptureError(
            f"torch.export could not capture the model; every strategy failed:\n{lines}\n"
            "Next steps: look for data-dependent Python control flow (an `if` on a tensor "
            "value: use torch.cond), unsupported Python constructs, or inputs torch.export "
            "cannot flatten; the last strategy's error is chained below."
        ).with_traceback(None)
        if last is None
        else _chain(
            CaptureError(
                f"torch.export could not capture the model; every strategy failed:\n{lines}\n"
                "Next steps: look for data-dependent Python control flow (an `if` on a tensor "
                "value: use torch.cond), unsupported Python constructs, or inputs torch.export "
                "cannot flatten; the last strategy's error is chained below."
            ),
            last,
        )
    )


def _chain(error: CaptureError, cause: BaseException) -> CaptureError:
    error.__cause__ = cause
    return error


def _unsupported_error(unsupported: Sequence[UnsupportedNode]) -> UnsupportedOpsError:
    ops = sorted({u.op for u in unsupported})
    lines = [
        f"  - {u.op} (FX node {u.node!r}, module {u.origin.module_path or '<root>'!r}) "
        f"at {u.origin.where}" + (f": {u.origin.code}" if u.origin.code else "")
        for u in unsupported
    ]
    return UnsupportedOpsError(
        f"{len(ops)} operator(s) have no ONNX function: {', '.join(ops)}.\n"
        + "\n".join(lines)
        + "\nNext steps: register an onnxscript function for each with "
        "OnnxRegistry.register_op(...) and pass it as ExportOptions(onnx_registry=...).",
        unsupported=tuple(
            (u.op, u.node, u.origin.module_path, u.origin.where) for u in unsupported
        ),
    )


def _names(
    model: torch.nn.Module, program: ExportedProgram, kwargs: dict[str, Any]
) -> tuple[list[str], list[str], list[str]]:
    signature = inspect.signature(model.forward)
    positional = [
        p.name
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
    ]
    paths = leaf_paths(program.call_spec.in_spec, positional)
    user_specs = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    tensor_inputs = [
        path
        for path, spec in zip(paths, user_specs, strict=True)
        if isinstance(spec.arg, TensorArgument)
    ]
    outputs = output_paths(program.call_spec.out_spec)
    taken = set(tensor_inputs)
    outputs = [f"{o}_out" if o in taken else o for o in outputs]
    del kwargs
    return paths, tensor_inputs, outputs


def dynamo_export(
    model: torch.nn.Module | Callable[..., Any],
    /,
    *model_args: Any,
    export_options: ExportOptions | None = None,
    **model_kwargs: Any,
) -> ONNXProgram:
    """Export a PyTorch model to ONNX through torch.export and onnxscript's torchlib.

    Args:
        model: The ``nn.Module`` (or a plain function) to export.
        *model_args: Example positional inputs, as you would call the model.
        export_options: How to capture, translate and optimize; defaults apply if None.
        **model_kwargs: Example keyword inputs.

    Returns:
        The :class:`ONNXProgram`; ``.save(path)`` writes it, calling it runs ONNX Runtime.

    Raises:
        CaptureError: torch.export failed with every capture strategy.
        UnsupportedOpsError: Some operators have no ONNX function (all are listed).
        ConversionError: An ONNX function failed on a node.
        OptimizationError: The optimizer failed.

    Example:
        >>> import torch, onnx_export
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
        >>> program = onnx_export.dynamo_export(model, torch.randn(3, 4))
        >>> x = torch.randn(3, 4)
        >>> torch.allclose(program(x)[0], model(x), atol=1e-5)
        True
    """
    options = export_options or ExportOptions()
    registry = options.onnx_registry or OnnxRegistry()
    module = model if isinstance(model, torch.nn.Module) else _FunctionModule(model)
    args, kwargs = canonical_inputs(module, model_args, model_kwargs)
    dynamic, dim_ids = to_torch_dynamic_shapes(options.dynamic_shapes, kwargs, len(args))
    program, attempts = capture(
        module, args, kwargs, dynamic_shapes=dynamic, strategies=options.capture_strategies
    )
    if program is None:
        raise _capture_error(attempts)
    program, _report = decompose(program, registry, always=options.decompose == "always")
    decisions, unsupported = find_unsupported(program.graph_module, registry)
    if unsupported:
        raise _unsupported_error(unsupported)
    paths, input_names, output_names = _names(module, program, kwargs)
    dim_names = dim_names_from_program(program, dynamic, paths, dim_ids)
    try:
        result = translate(
            program,
            decisions,
            input_names=input_names,
            output_names=output_names,
            dim_names=dim_names,
        )
    except ConversionError:
        raise
    except Exception as e:
        raise ConversionError(f"Translating the graph to ONNX failed: {e}") from e
    onnx_model = result.model
    if options.optimize:
        try:
            optimize_model(onnx_model)
        except Exception as e:
            raise OptimizationError(
                f"onnxscript's optimizer failed: {type(e).__name__}: {e}. "
                "Export with ExportOptions(optimize=False) to get the unoptimized model."
            ) from e
    convert_opset(onnx_model, options.opset_version)
    return ONNXProgram(
        onnx_model,
        program,
        capture_attempts=attempts,
        signature=inspect.signature(module.forward),
    )
