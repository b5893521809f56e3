"""In-place ops on fresh intermediate tensors rewritten out of place, without re-tracing.

``torch.export`` keeps ``x += y`` as ``aten.add_.Tensor``; functionalising it takes
``run_decompositions``, which re-traces the whole graph (most of a ResNet's or T5's
export time, for one ``hidden += residual``). When the mutated tensor is a fresh result
of an earlier op (not an input, parameter, buffer or view of anything) and no view of it
exists, the in-place op is the out-of-place op whose result replaces the tensor for every
later reader: that rewrite is exact, and cheap. Anything else is left to functionalisation.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
import torch.fx
from torch.export import ExportedProgram

__all__ = ["is_mutating", "rewrite_fresh_inplace"]


def _functional(target: object) -> torch._ops.OpOverload | None:
    """``aten.add.Tensor`` for ``aten.add_.Tensor`` (None when there is no such op)."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    name = target._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = target._overloadname
    functional = getattr(packet, overload, None) if packet is not None else None
    if not isinstance(functional, torch._ops.OpOverload) or functional._schema.is_mutable:
        return None
    returns = functional._schema.returns
    return functional if len(returns) == 1 and returns[0].alias_info is None else None


def _fresh(node: object) -> bool:
    """Whether ``node`` is an op result that aliases nothing (not an input or a view)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:  # one output of a multi-output op
        return _fresh(node.args[0]) and not _returns_alias(node.args[0].target)  # type: ignore[union-attr]
    schema = getattr(target, "_schema", None)
    if schema is None or schema.is_mutable or len(schema.returns) < 1:
        return False
    return not _returns_alias(target)


def _returns_alias(target: object) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


#: Arguments that select positions, never promoted with the values (``scatter_add_``'s
#: int64 ``index``, ``masked_fill_``'s bool ``mask``).
_POSITIONS = frozenset({"index", "indices", "mask"})


def _same_dtype(node: torch.fx.Node) -> bool:
    """Out of place gives the in-place dtype: every tensor argument has self's dtype.

    Index and mask arguments are left out: they take no part in type promotion.
    """
    want = getattr(node.meta.get("val"), "dtype", None)
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    given = [*zip(names, node.args, strict=False), *node.kwargs.items()]
    tensors = [a for n, a in given if isinstance(a, torch.fx.Node) and n not in _POSITIONS]
    dtypes = {getattr(a.meta.get("val"), "dtype", None) for a in tensors}
    return want is not None and dtypes == {want}


def _rewritable(
    node: torch.fx.Node,
    order: dict[torch.fx.Node, int],
    has_function: Callable[[torch._ops.OpOverload], bool],
) -> bool:
    if node.op != "call_function" or not node.args:
        return False
    functional = _functional(node.target)
    # Without an ONNX function (``resize_`` -> ``resize``) the out-of-place op would need a
    # decomposition it may not have; functionalisation handles those.
    if functional is None or not has_function(functional):
        return False
    mutated = node.args[0]
    if not _fresh(mutated) or not _same_dtype(node):
        return False
    assert isinstance(mutated, torch.fx.Node)
    for user in mutated.users:
        if user is node:
            continue
        if user.op != "call_function" or _returns_alias(user.target):
            return False  # a view (or an unknown op) may see the mutation
        if order[user] < order[node] and is_mutating(user.target):
            return False
    return True


def is_mutating(target: object) -> bool:
    """Whether ``target``'s schema mutates an argument (an in-place or out= op)."""
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def _rename_in_signature(program: ExportedProgram, old: str, new: str) -> None:
    """The program's input/output specs name ``new`` where they named ``old``."""
    signature = program.graph_signature
    for spec in (*signature.input_specs, *signature.output_specs):
        if getattr(spec.arg, "name", None) == old:
            spec.arg = type(spec.arg)(name=new)


def rewrite_fresh_inplace(
    program: ExportedProgram, has_function: Callable[[torch._ops.OpOverload], bool]
) -> int:
    """Rewrite in-place ops on fresh intermediates out of place; return how many.

    Only ops whose out-of-place form ``has_function`` (an ONNX function) are rewritten.
    """
    graph = program.graph_module.graph
    rewritten = 0
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if not _rewritable(node, order, has_function):
            continue
        mutated = node.args[0]
        assert isinstance(mutated, torch.fx.Node)
        with graph.inserting_after(node):
            result = graph.call_function(_functional(node.target), node.args, node.kwargs)
        result.meta = dict(node.meta)
        later = [u for u in mutated.users if u not in (node, result) and order[u] > order[node]]
        for user in later:
            user.replace_input_with(mutated, result)
        node.replace_all_uses_with(result)
        _rename_in_signature(program, node.name, result.name)
        graph.erase_node(node)
        order[result] = order.pop(node)
        rewritten += 1
    if rewritten:
        program.graph_module.recompile()
    return rewritten
