"""Decomposition: lower the captured graph only as far as ONNX needs.

``run_decompositions`` re-traces the whole graph (0.3-0.9 s on small transformers), so
it runs only when needed: when an op has no ONNX function, or when the graph still
mutates tensors in place (its functionalisation removes those). Ops with an ONNX
function stay whole (``scaled_dot_product_attention``, ``layer_norm``, ...).

Decomposition runs under ``torch.no_grad()`` whatever the caller's grad mode: the graph
was captured already (train/eval behaviour included) and ONNX has no autograd.
Side-effect tokens that decompositions introduce (``_linalg_check_errors``) are removed.

Tensors the re-trace creates and lifts as constants (the empty ``torch.tensor([])`` a
``transformers`` cache layer starts from, met again under ``vmap``-built masks) are kept:
torch builds the decomposed program with the old ``constants`` dictionary and would
refuse its own result ("Constant tensor lifted_tensor_0 is not in the constants
dictionary").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from onnx_export._registry import OnnxRegistry
from onnx_export.capture._data_dependent import data_dependent_line
from onnx_export.capture._inplace import is_mutating, rewrite_fresh_inplace
from onnx_export.capture._local_decomp import decompose_locally
from onnx_export.capture._output_order import flat_outputs
from onnx_export.capture._strategies import EXPORT_LOCK
from onnx_export.errors import CaptureError

__all__ = ["DecompositionReport", "decompose"]

# Assertions torch.export leaves in the graph: they have no effect on the outputs.
_ASSERTIONS = {
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten._assert_async.msg,
    torch.ops.aten._linalg_check_errors.default,  # raises on singular input; returns nothing
}


@dataclasses.dataclass(frozen=True)
class DecompositionReport:
    """What decomposition did.

    Attributes:
        ran: Whether ``run_decompositions`` ran.
        why: Why it ran (or why not).
        decomposed: Operators that were present before and gone after.
    """

    ran: bool
    why: str
    decomposed: tuple[str, ...] = ()


def _call_targets(gm: torch.fx.GraphModule) -> Iterable[object]:
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            yield node.target
    for sub in gm.children():
        if isinstance(sub, torch.fx.GraphModule):
            yield from _call_targets(sub)


# In-place ops that change only autograd metadata: no values change, so they are dropped
# rather than functionalised (``transformers`` caches ``detach_`` fresh tensors).
_METADATA_ONLY_INPLACE = {
    torch.ops.aten.detach_.default,
    torch.ops.aten.requires_grad_.default,
}


def drop_metadata_only_inplace(program: ExportedProgram) -> int:
    """Replace ``detach_``-like nodes by their input; return how many were dropped."""
    dropped = 0
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        graph = module.graph
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target in _METADATA_ONLY_INPLACE:
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)
                dropped += 1
        if dropped:
            module.recompile()
    return dropped


def _missing(registry: OnnxRegistry) -> Callable[[object], bool]:
    """Whether a node target is an ATen op without an ONNX function (assertions aside)."""

    def missing(target: object) -> bool:
        return (
            isinstance(target, torch._ops.OpOverload)
            and target not in _ASSERTIONS
            and not registry.is_registered(target)
        )

    return missing


def _needs(program: ExportedProgram, registry: OnnxRegistry) -> str:
    targets = set(_call_targets(program.graph_module))
    mutating = sorted(str(t) for t in targets if is_mutating(t))
    if mutating:
        return f"in-place ops to functionalise: {', '.join(mutating[:5])}"
    missing = sorted(
        str(t)
        for t in targets
        if isinstance(t, torch._ops.OpOverload)
        and t not in _ASSERTIONS
        and not registry.is_registered(t)
    )
    if missing:
        return f"ops without an ONNX function: {', '.join(missing[:5])}"
    return ""


@functools.lru_cache(maxsize=1)
def _default_decompositions(op_count: int) -> dict[Any, Any]:
    """torch.export's default table, built once per set of registered ops (``op_count``).

    Building it walks every CompositeImplicitAutograd op (about a second); an op defined
    later (a custom op) changes the count and so rebuilds it.
    """
    return dict(torch.export.default_decompositions())


def _decomposable(op: torch._ops.OpOverload) -> bool:
    """Whether torch has a decomposition of ``op`` (the table :func:`_table` draws from)."""
    from torch._decomp import decomposition_table

    table = _default_decompositions(len(torch._C._dispatch_get_all_op_names()))
    return op in table or op in decomposition_table


def _table(
    registry: OnnxRegistry, program: ExportedProgram | None = None
) -> dict[torch._ops.OperatorBase, object]:
    """torch.export's default decompositions, less the ops we have ONNX functions for.

    An op of ``program`` that has neither an ONNX function nor a default decomposition
    takes torch's other registered decomposition when there is one (for example
    ``max_pool2d_with_indices_backward``).
    """
    table = dict(_default_decompositions(len(torch._C._dispatch_get_all_op_names())))
    for op in list(table):
        if isinstance(op, torch._ops.OpOverload) and registry.is_registered(op):
            del table[op]
    if program is not None:
        from torch._decomp import decomposition_table

        for op in set(_call_targets(program.graph_module)):
            if (
                isinstance(op, torch._ops.OpOverload)
                and op not in table
                and op in decomposition_table
                and not registry.is_registered(op)
            ):
                table[op] = decomposition_table[op]
    return table


def _without_effect_tokens(program: ExportedProgram) -> ExportedProgram:
    """Side-effect tokens (e.g. around ``_linalg_check_errors``) have no ONNX meaning."""
    kinds = {spec.kind for spec in program.graph_signature.input_specs}
    if InputKind.TOKEN not in kinds:
        return program
    from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

    return _remove_effect_tokens(program)


#: Ops that turn a tensor condition into the scalar an assertion checks
#: (``torch._check_tensor_all(cond)``: ``_is_all_true(cond).item() == 1``).
_CONDITIONS = {
    torch.ops.aten._is_all_true.default,
    torch.ops.aten._is_any_true.default,
    torch.ops.aten.item.default,
    torch.ops.aten._local_scalar_dense.default,
}


def _is_symbolic_arithmetic(node: torch.fx.Node) -> bool:
    """``sym_size``, ``operator.eq``, ``torch.sym_not``, ``item``...: what feeds an assertion."""
    target = node.target
    if target is torch.ops.aten.sym_size.int or target in _CONDITIONS:
        return True
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", "")
    return module in ("_operator", "operator") or name.startswith("sym_")


def remove_assertions(program: ExportedProgram) -> None:
    """Drop runtime assertion nodes, which compute nothing the model returns.

    With deferred runtime asserts, torch.export checks a guard on dynamic sizes
    (``Ne(Mod(s0, 6), 0)``) with ``_assert_scalar``; the assertion and the size arithmetic
    that only it used go, in every subgraph too.
    """
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        graph = module.graph
        asserts = [
            n
            for n in graph.nodes
            if n.op == "call_function" and n.target in _ASSERTIONS and not n.users
        ]
        for node in asserts:
            _erase_with_inputs(graph, node)
        if asserts:
            module.recompile()


def _erase_with_inputs(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Erase ``node``, then the size arithmetic that fed only it (other dead code stays)."""
    inputs = [i for i in node.all_input_nodes if i.op == "call_function"]
    graph.erase_node(node)
    for value in inputs:
        if not value.users and _is_symbolic_arithmetic(value):
            _erase_with_inputs(graph, value)


@contextlib.contextmanager
def _keeping_new_constants(program: ExportedProgram) -> Iterator[None]:
    """Within the block, constants that torch.export lifts are added to ``program.constants``.

    ``run_decompositions`` re-traces the graph, lifts the tensors created while tracing
    (its ``_materialize_and_lift_constants``), then builds the new program with the
    dictionary of ``program``: constants new to the re-trace would be missing from it.
    """
    from torch.export import _trace as trace_module

    trace: Any = trace_module  # a private function, not in its stubs
    lift = getattr(trace, "_materialize_and_lift_constants", None)
    if lift is None:  # another torch: nothing to patch, its own behaviour stands
        yield
        return

    def lift_and_keep(*args: Any, **kwargs: Any) -> Any:
        constants = lift(*args, **kwargs)
        for name, value in constants.items():
            program.constants.setdefault(name, value)
        return constants

    trace._materialize_and_lift_constants = lift_and_keep
    try:
        yield
    finally:
        trace._materialize_and_lift_constants = lift


def _retrace_error(error: Exception) -> Exception:
    """The error of a failed re-trace for decomposition.

    A data-dependent size (the capture itself worked) becomes a ``CaptureError`` at the
    model's line; any other failure is returned as it came.
    """
    line = data_dependent_line([error])
    if line is None:
        return error
    return CaptureError(
        f"{line.first_line()} (torch.export captured it, and failed when re-tracing the "
        "program to decompose ops ONNX lacks)\n"
        f"Next steps: {line.next_steps()} torch's error is chained below."
    )


def decompose(
    program: ExportedProgram, registry: OnnxRegistry, *, always: bool = False
) -> tuple[ExportedProgram, DecompositionReport]:
    """Decompose ``program`` when ONNX needs it, keeping ops that have ONNX functions."""
    drop_metadata_only_inplace(program)
    # `hidden += residual`: no re-trace. An out-of-place op without an ONNX function but
    # with a decomposition (`zeros(n).index_add_(...)` -> `index_add`) is rewritten too:
    # that node alone is decomposed below, where a whole re-trace would functionalise.
    rewrite_fresh_inplace(program, lambda op: registry.is_registered(op) or _decomposable(op))
    why = "requested (decompose='always')" if always else _needs(program, registry)
    if not why:
        remove_assertions(program)
        return program, DecompositionReport(False, "every op has an ONNX function")
    before = {str(t) for t in _call_targets(program.graph_module)}
    if why.startswith("ops without"):  # nothing to functionalise: those nodes alone if we can
        with EXPORT_LOCK:
            local = decompose_locally(program, _missing(registry), _table(registry, program))
        if local is not None:
            remove_assertions(program)
            return program, DecompositionReport(True, f"{why} (those nodes only)", local)
    # Inference semantics: ONNX graphs carry no autograd, and the model's train/eval
    # behaviour (dropout, batch norm) was fixed at capture. Re-tracing with grad mode on
    # only adds autograd's view checks, which fail on some attention reshapes (T5, Swin:
    # "Cannot view a tensor with shape ... and strides").
    with (
        EXPORT_LOCK,
        torch.no_grad(),
        _keeping_new_constants(program),
        flat_outputs(program) as derived,  # a ModelOutput's keys stay in the captured order
    ):
        try:
            decomposed = program.run_decompositions(_table(registry, program))
            derived.append(decomposed)
        except Exception as e:
            raise _retrace_error(e) from e
    program = _without_effect_tokens(decomposed)
    after = {str(t) for t in _call_targets(program.graph_module)}
    remove_assertions(program)
    return program, DecompositionReport(True, why, tuple(sorted(before - after)))
