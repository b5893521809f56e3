"""Verification: ONNX Runtime against eager PyTorch, and the first FX node that diverges.

When an output disagrees, the graph is translated again without optimization, every FX
node's value becomes an extra output, and the values are compared, in graph order, with
an FX interpreter's; the first node beyond tolerance is the culprit.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from onnx_export.adapters import InputShapeError, OnnxModule
from onnx_export.adapters._session_checks import quiet_session_options
from onnx_export.translation._dispatch import Dispatch
from onnx_export.translation._source import NodeOrigin, node_origin
from onnx_export.translation._translate import decision_key, translate

__all__ = [
    "OnnxRuntimeRunError",
    "OutputComparison",
    "NodeMismatch",
    "VerificationResult",
    "compare",
    "compare_one",
    "comparable",
    "dtype_tolerances",
    "find_culprit",
    "run_eager",
    "run_model",
]


class OnnxRuntimeRunError(RuntimeError):
    """ONNX Runtime raised while running the exported model on the export's example inputs."""


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    """How one output of the ONNX model compares with PyTorch.

    Floating outputs narrower than float32 (float16, bfloat16, float8) are compared in
    float32 with tolerances of at least ``2 * eps`` (relative) and ``eps`` (absolute) of
    their dtype; complex outputs as their real view; integer and bool outputs exactly.

    Attributes:
        name: The ONNX output's name.
        max_abs_error: Largest absolute difference.
        max_rel_error: Largest difference relative to PyTorch's magnitude.
        ok: Whether it is within ``atol + rtol * |expected|`` everywhere (equal, for
            integer and bool outputs).
        dtype: PyTorch's dtype of the output (``"bfloat16"``, ``"int64"``...).
        rtol: The relative tolerance used (0 for an exact comparison).
        atol: The absolute tolerance used (0 for an exact comparison).

    Example:
        >>> from onnx_export import OutputComparison
        >>> OutputComparison("logits", 1e-7, 1e-6, True).ok
        True
    """

    name: str
    max_abs_error: float
    max_rel_error: float
    ok: bool
    dtype: str = ""
    rtol: float = 0.0
    atol: float = 0.0


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
        note: How ONNX Runtime ran the model when it did not run it as is (e.g.
            computing in float32 because its CPU provider lacks bfloat16 kernels);
            empty otherwise.
        reference: What eager PyTorch ran: the model in eval mode under
            ``torch.no_grad()`` (as it is deployed), or the exported program when the
            export was given an ``ExportedProgram``.
        cause: When outputs disagree and no node is to blame, why: the model's eager path
            differs from the traced one (PyTorch's fast paths), or it was exported in
            training mode; empty otherwise.
        structure: Where the exported program's output structure (fields, keys and
            their order, number of items) differs from the eager model's; empty when
            they agree. A difference fails the check whatever the numbers.

    Example:
        >>> import torch, onnx_export
        >>> program = onnx_export.dynamo_export(torch.nn.Tanh(), torch.randn(3))
        >>> result = program.verify(torch.randn(3))
        >>> result.ok, result.culprit
        (True, None)
    """

    outputs: tuple[OutputComparison, ...]
    culprit: NodeMismatch | None = None
    note: str = ""
    reference: str = ""
    cause: str = ""
    structure: str = ""

    @property
    def ok(self) -> bool:
        """Whether the output structures agree and every output is within tolerance."""
        return not self.structure and all(o.ok for o in self.outputs)


_NARROW_FLOATS = (
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
)


def dtype_tolerances(dtype: str, rtol: float, atol: float) -> tuple[float, float]:
    """The tolerances to compare an output of ``dtype`` with: exact for integers and bool.

    Floats narrower than float32 get at least ``2 * eps`` relative and ``eps`` absolute
    tolerance of their dtype (one or two units in the last place).
    """
    real = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}
    dtype = real.get(dtype, dtype)
    if dtype in _NARROW_FLOATS:
        eps = float(torch.finfo(getattr(torch, dtype)).eps)
        return max(rtol, 2 * eps), max(atol, eps)
    if dtype.startswith(("float", "double", "half")):
        return rtol, atol
    return 0.0, 0.0


def comparable(value: Any) -> tuple[np.ndarray, str]:
    """A numpy array to compare, and the value's dtype name.

    Narrow floats become float32 and complex values their real view.
    """
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        tensor = value.detach().cpu().resolve_conj().resolve_neg()
        if tensor.is_complex():
            tensor = torch.view_as_real(
                tensor.to(torch.complex64) if dtype == "complex32" else tensor
            )
        if tensor.is_floating_point() and tensor.element_size() < 4:
            tensor = tensor.float()
        return tensor.numpy(), dtype
    array = np.asarray(value)
    dtype = array.dtype.name
    if np.iscomplexobj(array):
        array = np.stack([array.real, array.imag], axis=-1)
    elif dtype in _NARROW_FLOATS:
        array = array.astype(np.float32)
    return array, dtype


def _errors(
    expected: np.ndarray, got: np.ndarray, rtol: float, atol: float
) -> tuple[float, float, bool]:
    if expected.shape != got.shape:
        return float("inf"), float("inf"), False
    if expected.size == 0:
        return 0.0, 0.0, True
    exact = not (np.issubdtype(expected.dtype, np.inexact) or np.issubdtype(got.dtype, np.inexact))
    if exact:
        e, g = expected.astype(np.int64), got.astype(np.int64)
        if np.uint64 in (expected.dtype, got.dtype):
            e, g = expected.astype(np.float64), got.astype(np.float64)
        diff = np.abs(e - g).astype(np.float64)
        nonzero = e != 0
        rel = diff[nonzero] / np.abs(e[nonzero]) if nonzero.any() else np.zeros(1)
        return float(diff.max()), float(rel.max()), bool(np.array_equal(e, g))
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    same = (np.isnan(e) & np.isnan(g)) | (np.isinf(e) & (e == g))
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
        diff = np.where(same, 0.0, np.abs(e - g))
    diff = np.nan_to_num(diff, nan=np.inf)
    significant = np.abs(e) > atol  # relative error means little next to zero
    rel = diff[significant] / np.abs(e[significant]) if significant.any() else np.zeros(1)
    with np.errstate(invalid="ignore"):
        bound = atol + rtol * np.abs(np.nan_to_num(e, posinf=0.0, neginf=0.0))
    ok = bool(np.all(diff <= bound))
    return float(diff.max()), float(np.nan_to_num(rel, nan=np.inf).max()), ok


def compare_one(name: str, expected: Any, got: Any, rtol: float, atol: float) -> OutputComparison:
    """Compare one PyTorch value with ONNX Runtime's (tensors or arrays, any dtype)."""
    want, dtype = comparable(expected)
    have, _ = comparable(got)
    rtol, atol = dtype_tolerances(dtype, rtol, atol)
    return OutputComparison(name, *_errors(want, have, rtol, atol), dtype, rtol, atol)


def compare(
    names: Sequence[str],
    expected: Sequence[Any],
    got: Sequence[Any],
    rtol: float,
    atol: float,
) -> tuple[OutputComparison, ...]:
    """Per-output comparison of ONNX Runtime's results with PyTorch's.

    Values are torch tensors or numpy arrays of any dtype; pass torch tensors of narrow
    dtypes (not arrays already cast to float32) to get tolerances of that dtype.
    """
    if len(expected) != len(got):
        raise ValueError(f"PyTorch gave {len(expected)} tensors, ONNX Runtime {len(got)}.")
    return tuple(
        compare_one(name, e, g, rtol, atol) for name, e, g in zip(names, expected, got, strict=True)
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
            if value.name and value.name == node.meta.get("fx_node"):
                if value.name not in known:
                    model.graph.outputs.append(value)
                probes.append(value.name)  # graph outputs too: the last node may be wrong
    return model, probes


def find_culprit(
    program: ExportedProgram,
    decisions: dict[str, Dispatch],
    canonical: tuple[tuple[Any, ...], dict[str, Any]],
    feed: dict[str, Any],
    run_onnx: Callable[[ir.Model, dict[str, Any]], list[Any]],
    rtol: float,
    atol: float,
) -> NodeMismatch | None:
    """The first FX node (in graph order) whose ONNX value is beyond tolerance."""
    copies = pytree.tree_map(_eager_leaf, canonical)  # the graph may update its inputs
    leaves = pytree.tree_leaves(copies, is_leaf=lambda x: x is None)
    interpreter = _Recorder(program.graph_module)
    with torch.no_grad():
        interpreter.run(*_flat_graph_inputs(program, leaves))
    model, probes = _debug_model(program, decisions, list(feed))
    results = dict(zip([v.name for v in model.graph.outputs], run_onnx(model, feed), strict=True))
    nodes = {n.name: n for n in program.graph.nodes}
    for name in probes:
        expected = interpreter.values.get(name)
        if expected is None:
            continue
        comparison = compare_one(name, expected, results[name], rtol, atol)
        if not comparison.ok:
            node = nodes[name]
            decision = decisions.get(decision_key(node))
            function = decision.entry.name if decision and decision.entry else "-"
            return NodeMismatch(
                name,
                str(node.target),
                function,
                comparison.max_abs_error,
                comparison.max_rel_error,
                node_origin(node),
            )
    return None


def _quiet_options() -> Any:
    return quiet_session_options(importlib.import_module("onnxruntime"))


def run_model(model: ir.Model, feed: dict[str, Any], upcast: Sequence[str]) -> list[Any]:
    """Run a (debug) model on flat inputs by graph input name; flat outputs."""
    data = ir.serde.serialize_model(model).SerializeToString()
    module = OnnxModule(data, upcast=upcast, session_options=_quiet_options())
    return module._run_flat([feed[name] for name in module.input_names])


def _eager_leaf(leaf: Any) -> Any:
    if type(leaf) is np.ndarray:
        return torch.from_numpy(leaf.copy())
    return leaf.clone() if isinstance(leaf, torch.Tensor) else leaf


def run_eager(program: ExportedProgram, canonical: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
    """Run the captured program on copies of the canonical inputs (numpy leaves as torch).

    Copies: a program that updates an input in place (a cache's states written with
    ``copy_``) must not change what ONNX Runtime is given next.
    """
    args, kwargs = pytree.tree_map(_eager_leaf, canonical)
    try:
        with torch.no_grad():
            return program.module()(*args, **kwargs)
    except (AssertionError, RuntimeError) as error:
        # A guard on the inputs (AssertionError "Guard failed"), a deferred runtime assert
        # ("Runtime assertion failed"), or the model's own code refusing the sizes (a
        # reshape the sizes cannot meet): the inputs break a condition of the model's code.
        text = str(error)
        if isinstance(error, AssertionError) and "Guard failed" not in text:
            raise
        raise InputShapeError(
            f"inputs: expected shapes that meet the conditions of the model's code, got "
            f"shapes that break it ({type(error).__name__}: {text.splitlines()[0]}). The "
            "exported model (PyTorch's and ONNX's) holds only where they are met: pass inputs "
            "that meet them, like the example inputs."
        ) from error
