"""Decompose only the nodes that need it, instead of re-tracing the whole program.

``ExportedProgram.run_decompositions`` re-traces every node of the graph even when one op
lacks an ONNX function: a ConvMixer with ``padding="same"`` convolutions (``conv2d.padding``)
or weight standardisation through ``var_mean``/``reshape_as`` spent more time in that
re-trace than in the capture itself (#22). Here each such node is traced alone, on meta
tensors of its inputs' shapes, with the same decomposition table, and the small graph that
comes out replaces the node in place: the cost is that of the decomposed nodes, not of the
model.

It applies when the program has nothing to functionalise (no in-place ops), the node's
inputs and outputs have static shapes, and every op the decomposition produces has an
ONNX function; otherwise the caller re-traces as before.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

__all__ = ["decompose_locally"]

_META_KEYS = ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node", "torch_fn")


def _static(value: Any) -> bool:
    leaves = [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]
    return all(isinstance(d, int) for t in leaves for d in t.shape) and all(
        not isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool)
        for v in pytree.tree_leaves(value)
    )


def _meta_like(value: Any) -> Any:
    # Contiguous: ONNX values have no strides, and a decomposition that restores a strided
    # input's layout adds in-place ``as_strided_`` nodes (adaptive_avg_pool1d in Swin).
    if isinstance(value, torch.Tensor):
        return torch.empty(tuple(value.shape), dtype=value.dtype, device="meta")
    return value


def _signature(node: torch.fx.Node) -> str:
    """The op and its arguments with tensors as (shape, dtype): equal keys trace alike."""

    def describe(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            val = value.meta.get("val")
            if isinstance(val, torch.Tensor):
                return ("T", tuple(val.shape), val.dtype)
            return ("N", value.name)  # a non-tensor node: never shared
        return value

    return repr((node.target, pytree.tree_map(describe, (node.args, node.kwargs))))


def _symbolic_inputs(values: Any, out: Any) -> Any:
    """The program's fake mode when only tensor shapes are symbolic (no SymInt arguments)."""
    leaves = pytree.tree_leaves(values)
    if any(isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool) for v in leaves):
        return None  # a size computed in the graph: its node is not an input of the trace
    tensors = [v for v in (*leaves, *pytree.tree_leaves(out)) if isinstance(v, torch.Tensor)]
    fake_mode = detect_fake_mode(tensors) if tensors else None
    return fake_mode if fake_mode is not None and fake_mode.shape_env is not None else None


def _shape_env_state(fake_mode: Any) -> tuple[int, int, int, int]:
    """Guards, replacements, runtime asserts and symbols: a trace that adds any is refused."""
    env = fake_mode.shape_env
    asserts = sum(len(v) for v in env.deferred_runtime_asserts.values())
    return len(env.guards), len(env.replacements), asserts, len(env.var_to_range)


def _tensor_call(
    node: torch.fx.Node, values: Any
) -> tuple[list[Any], list[int], Callable[..., Any]]:
    """``values``' leaves, where its tensors are, and ``node``'s op on other tensors there.

    The op is called with the arguments ``values`` holds (a tree of ``args`` and
    ``kwargs``), each tensor replaced by the next one given.
    """
    flat, spec = pytree.tree_flatten(values)
    positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    target = node.target
    assert callable(target)  # an op node's target

    def call(*tensors: torch.Tensor) -> Any:
        leaves = list(flat)
        for i, tensor in zip(positions, tensors, strict=True):
            leaves[i] = tensor
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return target(*args, **kwargs)

    return flat, positions, call


def _traced(node: torch.fx.Node, table: Mapping[Any, Any]) -> torch.fx.GraphModule | None:
    """``node``'s op alone, decomposed, as a graph whose placeholders are its tensor args.

    Static shapes trace on meta tensors. Symbolic shapes trace on fake tensors of the
    program's own fake mode, so that the sizes the decomposition reads (``sym_numel``,
    ``sym_size``) are nodes of the graph and its values carry the program's symbols; a
    decomposition that would guard on a symbol (or specialise it) is refused, and the
    caller re-traces the whole program as before.
    """
    values = pytree.tree_map_only(
        torch.fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs)
    )
    if not _static(values) or not _static(node.meta.get("val")):
        fake_mode = _symbolic_inputs(values, node.meta.get("val"))
        return None if fake_mode is None else _traced_symbolic(node, values, table, fake_mode)
    flat, positions, call = _tensor_call(node, values)

    try:
        with torch.no_grad():
            return make_fx(call, decomposition_table=dict(table))(
                *[_meta_like(flat[i]) for i in positions]
            )
    except Exception:
        return None


def _traced_symbolic(
    node: torch.fx.Node, values: Any, table: Mapping[Any, Any], fake_mode: Any
) -> torch.fx.GraphModule | None:
    flat, positions, call = _tensor_call(node, values)

    before = _shape_env_state(fake_mode)
    try:
        with fake_mode, torch.no_grad():
            # Contiguous, as on the static path: a decomposition that restores a strided
            # input's layout would add in-place nodes.
            inputs = [torch.empty(flat[i].shape, dtype=flat[i].dtype) for i in positions]
            sub = make_fx(call, decomposition_table=dict(table), tracing_mode="real")(*inputs)
    except Exception:
        return None
    if _shape_env_state(fake_mode) != before:
        return None  # the decomposition guards on a size: only a whole re-trace keeps it
    if any(is_mutable(n.target) for n in sub.graph.nodes if n.op == "call_function"):
        return None
    return sub


def is_mutable(target: object) -> bool:
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def _spliceable(node: torch.fx.Node, sub: torch.fx.GraphModule) -> bool:
    """No constants of its own in ``sub``; a tuple result is read by ``getitem`` only."""
    if any(n.op == "get_attr" for n in sub.graph.nodes):
        return False
    output = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    if isinstance(output, torch.fx.Node):
        return True
    return all(user.target is operator.getitem for user in node.users)


def _splice(graph: torch.fx.Graph, node: torch.fx.Node, sub: torch.fx.GraphModule) -> None:
    """Replace ``node`` by a copy of ``sub``'s nodes, fed with ``node``'s tensor args."""
    flat, _ = pytree.tree_flatten((node.args, node.kwargs))
    tensors = [a for a in flat if isinstance(a, torch.fx.Node)]
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    env: dict[torch.fx.Node, Any] = dict(zip(placeholders, tensors, strict=True))
    output: Any = None
    with graph.inserting_before(node):
        for inner in sub.graph.nodes:
            if inner.op == "output":
                output = pytree.tree_map_only(torch.fx.Node, env.__getitem__, inner.args[0])
            elif inner.op != "placeholder":
                copy = graph.node_copy(inner, env.__getitem__)
                copy.meta.update({k: node.meta[k] for k in _META_KEYS if k in node.meta})
                env[inner] = copy
    if isinstance(output, torch.fx.Node):
        node.replace_all_uses_with(output)
    else:
        for user in list(node.users):
            user.replace_all_uses_with(output[user.args[1]])
            graph.erase_node(user)
    graph.erase_node(node)


def decompose_locally(
    program: ExportedProgram,
    missing: Callable[[object], bool],
    table: Mapping[Any, Any],
) -> tuple[str, ...] | None:
    """Decompose, in place, each node whose op ``missing`` says has no ONNX function.

    Returns the ops decomposed, or ``None`` (and the program untouched) when a node
    cannot be decomposed alone or its decomposition still holds a missing op: then the
    whole program must be re-traced.
    """
    gm = program.graph_module
    plans: list[tuple[torch.fx.Node, torch.fx.GraphModule]] = []
    traced: dict[str, torch.fx.GraphModule | None] = {}  # one trace per op and signature
    for node in gm.graph.nodes:
        if node.op != "call_function" or not missing(node.target):
            continue
        key = _signature(node)
        if key not in traced:
            traced[key] = _traced(node, table)
        sub = traced[key]
        if sub is None:
            return None
        inner = [n.target for n in sub.graph.nodes if n.op == "call_function"]
        if any(missing(t) for t in inner if t is not operator.getitem):
            return None
        if not _spliceable(node, sub):
            return None
        plans.append((node, sub))
    if not plans or any(isinstance(m, torch.fx.GraphModule) for m in gm.children()):
        return None  # nothing found here (missing ops in subgraphs): re-trace
    for node, sub in plans:
        _splice(gm.graph, node, sub)
    gm.graph.lint()
    gm.recompile()
    return tuple(sorted({str(node.target) for node, _ in plans}))
