"""Verification: ONNX Runtime against eager PyTorch, and the first FX node that diverges.

When an output disagrees, the graph is translated again without optimization, every FX
node's value becomes an extra output, and the values are compared, in graph order, with
an FX interpreter's; the first node beyond tolerance is the culprit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from onnx_export._dispatch import Dispatch
from onnx_export._source import NodeOrigin, node_origin
from onnx_export._translate import decision_key, translate

__all__ = ["OutputComparison", "NodeMismatch", "VerificationResult", "compare", "find_culprit"]


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    """How one output of the ONNX model compares with PyTorch.

    Attributes:
        name: The ONNX output's name.
        max_abs_error: Largest absolute difference.
        max_rel_error: Largest difference relative to PyTorch's magnitude.
        ok: Whether it is within ``atol + rtol * |expected|`` everywhere.

    Example:
        >>> from onnx_export import OutputComparison
        >>> OutputComparison("logits", 1e-7, 1e-6, True).ok
        True
    """

    name: str
    max_abs_error: float
    max_rel_error: float
    ok: bool


@dataclasses.dataclass(frozen=True)
class NodeMismatch:
    """The first FX node whose ONNX value diverges from PyTorch's.

    Attributes:
        node: The FX node's name.
        op: Its operator.
        function: The ONNX function that translated it.
        max_abs_error: Largest absolute difference at that node.
        max_rel_error: Largest relative difference at that node.
        origin: Module path and the user's source line.

    Example:
        ``program.verify(x).culprit`` is one when outputs disagree::

            culprit = program.verify(x).culprit
            if culprit:
                print(culprit.node, culprit.op, culprit.origin.where)
    """

    node: str
    op: str
    function: str
    max_abs_error: float
    max_rel_error: float
    origin: NodeOrigin


@dataclasses.dataclass(frozen=True)
class VerificationResult:
    """Outcome of :meth:`onnx_export.ONNXProgram.verify`.

    Attributes:
        outputs: One comparison per output.
        culprit: When outputs disagree, the first FX node that diverges (if found).

    Example:
        >>> import torch, onnx_export
        >>> program = onnx_export.dynamo_export(torch.nn.Tanh(), torch.randn(3))
        >>> result = program.verify(torch.randn(3))
        >>> result.ok, result.culprit
        (True, None)
    """

    outputs: tuple[OutputComparison, ...]
    culprit: NodeMismatch | None = None

    @property
    def ok(self) -> bool:
        """Whether every output is within tolerance."""
        return all(o.ok for o in self.outputs)


def _errors(
    expected: np.ndarray, got: np.ndarray, rtol: float, atol: float
) -> tuple[float, float, bool]:
    if expected.shape != got.shape:
        return float("inf"), float("inf"), False
    if np.bool_ in (expected.dtype, got.dtype):
        expected, got = expected.astype(np.int64), got.astype(np.int64)
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    if e.size == 0:
        return 0.0, 0.0, True
    both_nan = np.isnan(e) & np.isnan(g)
    diff = np.where(both_nan, 0.0, np.abs(e - g))
    diff = np.nan_to_num(diff, nan=np.inf)
    significant = np.abs(e) > atol  # relative error means little next to zero
    rel = diff[significant] / np.abs(e[significant]) if significant.any() else np.zeros(1)
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.nan_to_num(e))))
    return float(diff.max()), float(rel.max()), ok


def compare(
    names: Sequence[str],
    expected: Sequence[np.ndarray],
    got: Sequence[np.ndarray],
    rtol: float,
    atol: float,
) -> tuple[OutputComparison, ...]:
    """Per-output comparison of ONNX Runtime's results with PyTorch's."""
    if len(expected) != len(got):
        raise ValueError(f"PyTorch gave {len(expected)} tensors, ONNX Runtime {len(got)}.")
    return tuple(
        OutputComparison(name, *_errors(e, g, rtol, atol))
        for name, e, g in zip(names, expected, got, strict=True)
    )


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function" and isinstance(result, torch.Tensor):
            self.values[n.name] = result
        return result


def _flat_graph_inputs(program: ExportedProgram, user_leaves: Sequence[Any]) -> list[Any]:
    leaves = iter(user_leaves)
    flat = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            flat.append(next(leaves))
        else:
            target = str(spec.target)
            tensor = program.state_dict.get(target)
            flat.append(program.constants[target] if tensor is None else tensor)
    return flat


def _debug_model(
    program: ExportedProgram, decisions: dict[str, Dispatch], input_names: Sequence[str]
) -> tuple[ir.Model, list[str]]:
    model = translate(program, decisions, input_names=input_names).model
    known = {v.name for v in model.graph.outputs}
    probes = []
    for node in model.graph:
        for value in node.outputs:
            if value.name and value.name not in known and value.name == node.meta.get("fx_node"):
                model.graph.outputs.append(value)
                probes.append(value.name)
    return model, probes


def find_culprit(
    program: ExportedProgram,
    decisions: dict[str, Dispatch],
    canonical: tuple[tuple[Any, ...], dict[str, Any]],
    feed: dict[str, np.ndarray],
    run_onnx: Callable[[ir.Model, dict[str, np.ndarray]], list[np.ndarray]],
    rtol: float,
    atol: float,
) -> NodeMismatch | None:
    """The first FX node (in graph order) whose ONNX value is beyond tolerance."""
    leaves = pytree.tree_leaves(canonical, is_leaf=lambda x: x is None)
    interpreter = _Recorder(program.graph_module)
    with torch.no_grad():
        interpreter.run(*_flat_graph_inputs(program, leaves))
    model, probes = _debug_model(program, decisions, list(feed))
    results = dict(zip([v.name for v in model.graph.outputs], run_onnx(model, feed), strict=True))
    nodes = {n.name: n for n in program.graph.nodes}
    for name in probes:
        expected = interpreter.values.get(name)
        if expected is None or expected.is_complex():
            continue
        abs_error, rel_error, ok = _errors(expected.numpy(), np.asarray(results[name]), rtol, atol)
        if not ok:
            node = nodes[name]
            decision = decisions.get(decision_key(node))
            function = decision.entry.name if decision and decision.entry else "-"
            return NodeMismatch(
                name, str(node.target), function, abs_error, rel_error, node_origin(node)
            )
    return None
