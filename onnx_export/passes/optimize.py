"""Optimization and opset conversion of the translated model.

Model weights (parameters and persistent buffers, and every placeholder of a fake or
meta export) are shielded from both: during the passes they are graph inputs without a
value, so nothing folds them, copies them (a folded ``Transpose`` of a weight would be a
second copy of it), renames them or reads data they may not have. They come back as
initializers, under their ``state_dict`` names, when the passes are done.

The passes are onnxscript's ``optimize`` (same order and settings), less the rewrite rules
whose pattern has several output nodes: onnxscript matches those by trying every
combination of candidate nodes in the whole graph, which is quadratic in model size (its
``SlicesSplit`` took 60% of a 32-layer Llama's export).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import onnxscript.version_converter
from onnxscript import rewriter
from onnxscript.optimizer import _constant_folding  # the pass onnxscript's optimize runs
from onnxscript.rewriter import _pattern_ir
from torch._subclasses.fake_tensor import unset_fake_temporarily

from onnx_export._fake import is_weight
from onnx_export.passes._inference import Constants, inferred_result, inferred_types

__all__ = ["optimize_model", "convert_opset", "weights_shielded"]


@contextlib.contextmanager
def weights_shielded(graph: ir.Graph) -> Iterator[list[ir.Value]]:
    """Turn the weights of ``graph`` into value-less graph inputs for the block.

    Afterwards the weights that are still used are initializers again (first, in their
    original order); the ones the passes made unused are dropped.
    """
    weights = [v for v in graph.initializers.values() if is_weight(v)]
    data = {id(v): v.const_value for v in weights}
    for value in weights:
        graph.initializers.pop(str(value.name))
        value.const_value = None
        graph.inputs.append(value)
    try:
        yield weights
    finally:
        shielded = {id(v) for v in weights}
        kept = [v for v in graph.inputs if id(v) not in shielded]
        graph.inputs.clear()
        graph.inputs.extend(kept)
        others = list(graph.initializers.values())
        for value in others:
            graph.initializers.pop(str(value.name))
        for value in weights:
            value.const_value = data[id(value)]
            if value.uses() or value.is_graph_output():
                graph.register_initializer(value)
        for value in others:
            graph.register_initializer(value)


@functools.cache
def _linear_rules() -> list[Any]:
    """The default rewrite rules of onnxscript whose pattern has a single output node.

    Made once a process, outside any fake mode: an export inside ``enable_fake_mode`` would
    otherwise copy the rules under torch's FakeTensorMode, which torch 2.14 refuses.
    """
    with unset_fake_temporarily():
        return [
            _exact_identities(rule)
            for rule in rewriter._DEFAULT_REWRITE_RULES
            if getattr(getattr(rule, "_target_pattern", None), "has_single_output_node", True)
        ]


def _exact_identities(rule: Any) -> Any:
    """``rule``, its constant patterns 0 and 1 matching only exactly 0 and 1.

    onnxscript's pattern constants match within ``abs_tol=1e-8`` and ``rel_tol=1e-5``,
    so its no-op rules took ``x + 1e-8`` for ``x + 0`` and removed it: an RMSNorm with
    ``eps=1e-8`` (Helium's testers) lost its epsilon and gave NaN on a zero row (a
    padding token's embedding), and ``x * 1.000001`` would lose its factor. Adding or
    multiplying by a number near the identity is a different op; only the identity
    itself is a no-op. The rule is copied, so onnxscript's own rules (which another
    exporter in the process may use) keep their tolerance.

    Only the pattern is copied deeply: a rule's matcher keeps the last node it tried
    (``SimplePatternMatcher._current_node``), and after ``torch.onnx.export`` or
    onnxscript's own ``optimize`` ran in the process that node belongs to their model,
    whose onnxscript objects cannot be copied (``Opset.__new__() missing 2 required
    positional arguments``). The copy gets a fresh matcher of the same class.
    """
    pattern = getattr(rule, "_target_pattern", None)
    constants = [
        value
        for node in getattr(pattern, "_nodes", ())
        for value in getattr(node, "inputs", ())
        if isinstance(value, _pattern_ir.Constant) and value.value in (0, 1)
    ]
    if not constants:
        return rule
    exact = copy.copy(rule)
    exact._target_pattern = copy.deepcopy(pattern)
    exact._matcher = type(rule._matcher)(exact._target_pattern)
    for node in exact._target_pattern._nodes:
        for value in node.inputs:
            if isinstance(value, _pattern_ir.Constant) and value.value in (0, 1):
                value._rel_tol = value._abs_tol = 0.0
    return exact


def _root_op(rule: Any) -> tuple[str, str] | None:
    """``(domain, op_type)`` of the node a rule's pattern ends in (None: any node)."""
    pattern = getattr(rule, "_target_pattern", None)
    nodes = getattr(pattern, "output_nodes", None) or [None]
    identifier = nodes[0].op_identifier() if nodes[0] is not None else None
    if identifier is None and nodes[0] is not None:  # commuted copies: constant patterns
        identifier = (_constant(nodes[0].domain), _constant(nodes[0].op))
    if not identifier or not isinstance(identifier[0], str) or not isinstance(identifier[1], str):
        return None  # a pattern that matches several ops or domains: always tried
    return identifier[0], identifier[1]


def _constant(pattern: Any) -> str | None:
    """The string a constant pattern (of an op type or domain) matches, else None."""
    value = getattr(pattern, "value", None)
    found = value() if callable(value) else None
    return found if isinstance(found, str) else None


def _producer_ops(rule: Any) -> tuple[tuple[int, str], ...]:
    """``(input index, op type)``: the root node's inputs that the pattern computes by an op.

    The matcher fails a root whose input there is missing, has no producer or one of
    another op type (``NodeOutputPattern``, its op an exact ``StringConstantPattern``).
    """
    pattern = getattr(rule, "_target_pattern", None)
    nodes = getattr(pattern, "output_nodes", None) or [None]
    needs = []
    for index, value in enumerate(getattr(nodes[0], "inputs", ())):
        if isinstance(value, _pattern_ir.NodeOutputPattern):
            op = getattr(value.producer(), "op", None)
            if isinstance(op, _pattern_ir.StringConstantPattern):
                needs.append((index, op.value()))
    return tuple(needs)


def _guarded(rule: Any, root: tuple[str, str] | None) -> Any:
    """``rule``, tried only at nodes of its root op whose inputs come from its pattern's ops.

    onnxscript tries every rule at every node, through its whole matcher even when the op
    type differs (17 000 tries, 40% of the optimizer on a Swin stand-in, #22); a copy of
    the rule whose ``try_rewrite`` checks the op first does the same work for the nodes it
    can match. It checks the ops that produce the root's inputs too, where the pattern
    names them (``Reshape(Reshape(x))``: 40% of the tries at UNet's nodes, #39): a
    node the check turns away is one the matcher fails, and a failed try changes nothing.
    """
    if root is None:
        return rule
    domain, op_type = _domain(root[0]), root[1]
    needs = _producer_ops(rule)
    original = rule.try_rewrite

    def try_rewrite(model: Any, graph: Any, node: ir.Node, **kwargs: Any) -> Any:
        if node.op_type != op_type or _domain(node.domain) != domain:
            return None
        if needs:
            inputs = node.inputs
            for index, op in needs:
                value = inputs[index] if index < len(inputs) else None
                producer = value.producer() if value is not None else None
                if producer is None or producer.op_type != op:
                    return None
        return original(model, graph, node, **kwargs)

    guarded = copy.copy(rule)
    guarded.try_rewrite = try_rewrite
    return guarded


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


class _ByRootOp:
    """Rules tried as one: at a node, only those whose pattern ends in the node's op.

    onnxscript's rule set calls every rule at every node (45,000 calls on a UNet, where
    3,000 reach a matcher, #39). This stands in the set for all of them: it tries, in
    their order, the rules of the node's op, and on a match shows the set the matched
    rule's ``name``, ``remove_nodes`` and ``as_function``, which the set reads right after.
    Its own ``remove_nodes`` starts as all of theirs, as the set reads it when built.
    """

    def __init__(self, rules: list[tuple[Any, tuple[str, str]]]) -> None:
        self._by_op: dict[tuple[str, str], list[Any]] = {}
        for rule, (domain, op_type) in rules:
            self._by_op.setdefault((_domain(domain), op_type), []).append(rule)
        self.name: str | None = None
        self.remove_nodes = all(rule.remove_nodes for rule, _ in rules)
        self.as_function = False
        pre = [rule.graph_pre_visitor for rule, _ in rules if rule.graph_pre_visitor]
        post = [rule.graph_post_visitor for rule, _ in rules if rule.graph_post_visitor]
        self.graph_pre_visitor = functools.partial(_call_each, pre) if pre else None
        self.graph_post_visitor = functools.partial(_call_each, post) if post else None

    def try_rewrite(self, model: Any, graph: Any, node: ir.Node, **kwargs: Any) -> Any:
        for rule in self._by_op.get((_domain(node.domain), node.op_type), ()):
            delta = rule.try_rewrite(model, graph, node, **kwargs)
            if delta is not None:
                self.name, self.remove_nodes = rule.name, rule.remove_nodes
                self.as_function = rule.as_function
                return delta
        return None


def _call_each(functions: list[Callable[[], None]]) -> None:
    for function in functions:
        function()


class _PrunedRewritePass(ir.passes.InPlacePass):
    """onnxscript's ``RewritePass`` with only the rules whose root op is in the model.

    A rule is tried at every node; most fail at once, on the op type, yet the tries cost a
    third of the optimizer's time. Rules whose pattern ends in an op the model does not
    have (``Conv`` rules in a Llama) are left out for this run; the pass manager runs
    again after a change, so ops that a rewrite creates get their rules on the next step.
    """

    def __init__(self, rules: list[Any]) -> None:
        super().__init__()
        self._rules = [(_guarded(rule, root), root) for rule in rules for root in [_root_op(rule)]]
        #: Whether the last run ended by removing unused nodes (onnxscript's rule set does
        #: when a rule keeps the nodes it matched).
        self.removed_unused = False

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        present = {
            (node.domain, node.op_type)
            for graph in (*model.graphs(), *model.functions.values())
            for node in graph
        }
        rules = [rule for rule, root in self._rules if root is None or root in present]
        self.removed_unused = False
        if not rules:
            return ir.passes.PassResult(model, modified=False)
        rooted = [
            (rule, root) for rule, root in self._rules if root is not None and root in present
        ]
        if len(rooted) == len(rules):  # every rule has a root op: one call per node
            rules = [_ByRootOp(rooted)]
        rule_set = rewriter.pattern.RewriteRuleSet(rules)
        result = rewriter.RewritePass(rule_set)(model)
        self.removed_unused = rule_set.remove_unused_nodes
        return result


class _FoldConstantsPass(_constant_folding.FoldConstantsPass):
    """onnxscript's constant folding, with ``GatherElements`` computed by numpy.

    The folder evaluates ops with ``onnx.reference``, whose ``GatherElements`` fails when
    the gathered axis has 64 entries or more (``np.choose`` takes at most 64 arrays; its
    fallback then raises "cannot reshape array of size 1 into shape (1,8)"): BERT's and RoBERTa's
    ``token_type_ids`` buffer gathered at the position ids stayed a node, and the
    folder logged the failure as a warning (#22). ``np.take_along_axis`` is
    ``GatherElements``' definition (negative indices count from the end).
    """

    def _reset(self) -> None:
        super()._reset()  # at each run: the constants' data is kept for one visit only
        self._seen: Constants = {}

    def _do_inference(self, node: ir.Node) -> None:
        """ONNX's shape inference, for the nodes whose outputs' shapes are not all known.

        Translation gives most values torch's dtype and shape; inferring them again is
        40% of the folder's time (#22). A dtype and a shape whose every dimension is an
        int or a named symbol (torch's: ``batch``, ``2*s0``) are all inference could
        find (the folder keeps a named dimension over an inferred one, unless inference
        finds an int, which torch would have given), so those nodes are left as they
        are: with dynamic axes, nearly every node (UNet2DCondition: 1,268 of 1,922, #39).
        """
        if all(_known(value) for value in node.outputs):
            return
        # The folder's own inference, with the protos cached as in translation (#39).
        try:
            outputs = inferred_types(node, self._opset_imports[node.domain], self._seen)
        except Exception:  # the folder's path meets it again, and skips
            outputs = None
        if outputs is None:
            super()._do_inference(node)
            return
        try:
            for output in node.outputs:
                if output.name in outputs:
                    shape, proto = inferred_result(outputs[output.name])
                    shape = shape.copy(frozen=True) if shape is not None else None
                    output.shape = _constant_folding._merge_shapes(output.shape, shape)
                    output.type = ir.serde.deserialize_type_proto_for_type(proto)
        except Exception:  # the folder skips a node inference refuses
            pass

    def process_node(self, node: ir.Node, is_function: bool) -> Any:
        if node.op_type == "GatherElements" and node.domain in ("", "ai.onnx"):
            folded = self._gather_elements(node)
            if folded is not None:
                return folded
        return super().process_node(node, is_function)

    def _gather_elements(self, node: ir.Node) -> Any:
        arrays = self._constant_inputs(node) if len(node.inputs) == 2 else None
        if arrays is None or node.graph is None:
            return None
        result = _take_along_axis(arrays[0], arrays[1], node.attributes.get_int("axis", 0))
        initializer = self.new_initializer(node, result) if result is not None else None
        if initializer is None:
            return None
        node.graph.register_initializer(initializer)
        return _constant_folding.Replacement([initializer], [])

    def _constant_inputs(self, node: ir.Node) -> list[np.ndarray] | None:
        """The data of ``node``'s inputs when all are small constants, else None."""
        for i, value in enumerate(node.inputs):  # what the folder knows them to be
            known = self._state.get_sym_value(value)
            if isinstance(known, ir.Value):
                node.replace_input_with(i, known)
        arrays = []
        for value in node.inputs:
            tensor = value.const_value if value is not None else None
            if value is None or tensor is None or value.is_graph_input():
                return None
            if tensor.size > self.input_size_limit:
                return None
            arrays.append(np.asarray(tensor.numpy()))
        return arrays


def _known(value: ir.Value) -> bool:
    """Whether ``value`` has a dtype and a shape of ints and named symbols."""
    shape = value.shape
    if value.type is None or shape is None:
        return False
    return all(isinstance(d, int) or d.value is not None for d in shape)


def _take_along_axis(array: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray | None:
    """ONNX's ``GatherElements``, or None where its inputs are out of its domain."""
    axis = axis + array.ndim if axis < 0 else axis
    if array.ndim != index.ndim or not 0 <= axis < array.ndim:
        return None
    if any(
        a != i for d, (a, i) in enumerate(zip(array.shape, index.shape, strict=True)) if d != axis
    ):
        return None  # numpy would broadcast where ONNX reads a corner: the folder's way
    index = np.where(index < 0, index + array.shape[axis], index).astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= array.shape[axis]):
        return None  # out of range: ONNX Runtime's error at run time, not ours now
    try:
        return np.ascontiguousarray(np.take_along_axis(array, index, axis=axis))
    except ValueError:
        return None


class _FoldAndRewrite(ir.passes.InPlacePass):
    """onnxscript's fold-and-rewrite loop (two steps), the second step only after a rewrite.

    The folder visits the nodes in order, so one visit folds whole chains: a second
    visit finds work only where a rewrite made new nodes. onnxscript runs it after any
    change, which a first fold always is; that second visit was a third of the
    optimizer's time (#22).
    """

    def __init__(self) -> None:
        super().__init__()
        self._fold = _FoldConstantsPass(
            shape_inference=True,
            input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
            output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
            should_fold=lambda node: None,
        )
        self._rewrite = _PrunedRewritePass(list(_linear_rules()))
        self._unused_nodes = common_passes.RemoveUnusedNodesPass()
        self._cleanup = ir.passes.Sequential(
            common_passes.RemoveUnusedFunctionsPass(),  # type: ignore[no-untyped-call]  # unannotated __init__
            common_passes.RemoveUnusedOpsetsPass(),
        )

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for _ in range(2):
            folded = self._fold(model).modified
            rewritten = self._rewrite(model).modified
            # When the rewriter ended with this very removal (a rule that keeps the nodes it
            # matched), a second one finds nothing: one reverse sweep removes whole chains.
            cleaned = False
            if not self._rewrite.removed_unused:
                cleaned = self._unused_nodes(model).modified
            cleaned = self._cleanup(model).modified or cleaned
            modified = modified or folded or rewritten or cleaned
            if not rewritten:
                break
        return ir.passes.PassResult(model, modified=modified)


def _passes() -> ir.passes.Sequential:
    """``onnxscript.optimizer.optimize_ir``'s passes, with the linear rewrite rules only."""
    return ir.passes.Sequential(
        common_passes.InlinePass(),
        _FoldAndRewrite(),
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common_passes.LiftSubgraphInitializersToMainGraphPass(),
        common_passes.DeduplicateInitializersPass(),
        common_passes.CommonSubexpressionEliminationPass(),
        common_passes.OutputFixPass(),
        common_passes.NameFixPass(),
    )


def optimize_model(model: ir.Model) -> tuple[int, int]:
    """Optimize in place with onnxscript's passes; return node counts before and after."""
    before = model.graph.num_nodes()
    with weights_shielded(model.graph):
        _passes()(model)
    return before, model.graph.num_nodes()


def convert_opset(model: ir.Model, target: int) -> None:
    """Bring the model to ``target`` opset (torchlib builds at 18)."""
    if model.opset_imports.get("", target) != target:
        with weights_shielded(model.graph):
            onnxscript.version_converter.convert_version(model, target)
    model.opset_imports[""] = target
    model.graph.opset_imports[""] = target
