"""Two floating dtypes meeting in an op that does not promote: the model's own mistake.

A half-precision model whose timestep embedding is computed in float32 (``torch.arange(...,
dtype=torch.float32)``) feeds a float32 tensor to a float16 ``Linear``. PyTorch refuses
that when it runs the model ("mat1 and mat2 must have the same dtype"), but torch.export
captures it (fake tensors do not check), and the ONNX graph is then refused by ONNX's
checker at the ``Gemm``, a line after the cause. Here such a node is found in the FX
graph before translation, and the error points at the line that made the odd tensor (its
producer), says which dtype met which, and what to change: the user can fix it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from onnx_export.errors import ConversionError, SourceLine
from onnx_export.translation._source import node_origin

__all__ = ["check_dtype_mix"]

#: Ops (by ``OpOverloadPacket`` name) whose floating tensor inputs must share one dtype.
_SAME_DTYPE = {
    "linear", "matmul", "mm", "bmm", "addmm", "addmv", "baddbmm", "addbmm", "mv", "dot",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d",
}  # fmt: skip


def _floating(arg: Any) -> torch.dtype | None:
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if isinstance(val, torch.Tensor) and val.dtype.is_floating_point:
        return val.dtype
    return None


def _odd_input(inputs: list[torch.fx.Node], weights: set[str]) -> tuple[torch.fx.Node, Any]:
    """The input whose dtype is not the model's: not a weight, unlike the others."""
    params = [n for n in inputs if n.op == "get_attr" or n.name in weights]
    others = [n for n in inputs if params and _floating(n) != _floating(params[0])]
    if others:
        return others[0], _floating(params[0])
    first = _floating(inputs[0])
    return next(n for n in inputs if _floating(n) != first), first


def _where(node: torch.fx.Node) -> SourceLine | None:
    origin = node_origin(node)
    if not origin.file or origin.line is None:
        return None
    return SourceLine(origin.file, origin.line, origin.code or "")


def _described(line: SourceLine | None) -> str:
    if line is None:
        return "(no line of your code recorded)"
    return f"{line.path}:{line.line}" + (f" (`{line.code}`)" if line.code else "")


def check_dtype_mix(program: torch.export.ExportedProgram) -> None:
    """Refuse a node of ``_SAME_DTYPE`` whose floating tensor inputs differ in dtype.

    Raises:
        ConversionError: Naming the op and its line, the odd input's dtype and the line
            that made it (the error's ``source``), and the fix.
    """
    signature = program.graph_signature
    weights = set(signature.inputs_to_parameters) | set(signature.inputs_to_buffers)
    for node in program.graph.nodes:
        packet = getattr(getattr(node.target, "overloadpacket", None), "__name__", "")
        if node.op != "call_function" or packet not in _SAME_DTYPE:
            continue
        inputs = [a for a in node.all_input_nodes if _floating(a) is not None]
        if len({_floating(a) for a in inputs}) < 2:
            continue
        odd, expected = _odd_input(inputs, weights)
        raise _mix_error(node, odd, _floating(odd), expected)


def _short(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _mix_error(node: torch.fx.Node, odd: torch.fx.Node, got: Any, expected: Any) -> ConversionError:
    made = _where(odd) if odd.op == "call_function" else None
    used = _where(node)
    culprit = made or used
    source = "an input of the model" if odd.op == "placeholder" else f"made at {_described(made)}"
    return ConversionError(
        f"The model mixes {_short(got)} and {_short(expected)}: {node.target} at "
        f"{_described(used)} gets a {_short(got)} tensor ({source}) where its other "
        f"inputs are {_short(expected)}. PyTorch refuses this too when it runs the model "
        f"(matmul and convolution do not promote dtypes).\nNext steps: make that tensor "
        f"{_short(expected)} where it is made (`.to({expected})`, or compute it in the "
        f"model's dtype), or export the model in {_short(got)}.",
        source=culprit,
    )
