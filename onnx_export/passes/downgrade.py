"""Bring a model below opset 18, to 17 down to 13, one node at a time.

Torchlib's functions are written for opset 18 and onnxscript's converter only goes up.
ONNX's own ``onnx.version_converter`` has no way down for most of what changed between
13 and 18 (``Pad`` at 18, ``Shape`` at 15, ``Add`` at 14, ``If`` at 16...), so the
conversion is ours: every node whose op changed after the target is rewritten by its
entry in :mod:`onnx_export.passes._older_forms` (in control-flow bodies and functions
too), then checked against the target's schema (types included). What has no older form
is collected, not just the first, and refused together: each op with the user's line,
what it does that the target lacks, and the lowest opset that has it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import onnx
import onnx.defs
import onnx_ir as ir

from onnx_export.passes._older_forms import LOWERINGS, NoOlderForm

__all__ = ["LOWEST_OPSET", "OpsetDowngradeError", "Refusal", "downgrade_opset"]

#: The oldest opset a model can be brought to (torchlib's ops need 13's forms).
LOWEST_OPSET = 13
_DEFAULT_DOMAINS = ("", "ai.onnx")
_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic
#: Above this many bytes of weights, ``onnx.checker`` (one protobuf) is skipped.
_CHECKED_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One node that has no form at the target opset.

    Attributes:
        op_type: The ONNX op.
        where: The user's source line (``file:line``) or module, as the node recorded it.
        reason: What the node does that the target lacks.
        lowest: The lowest opset that has it.
    """

    op_type: str
    where: str
    reason: str
    lowest: int


class OpsetDowngradeError(ValueError):
    """The model uses an op that has no form at the asked opset.

    Attributes:
        target: The opset asked for.
        refusals: Every node that has no form there.
        lowest: The lowest opset at which every refused node has a form.
    """

    def __init__(self, target: int, refusals: list[Refusal]) -> None:
        self.target, self.refusals = target, refusals
        self.lowest = max(r.lowest for r in refusals)
        seen: dict[tuple[str, str, str], Refusal] = {}
        for r in refusals:
            seen.setdefault((r.op_type, r.where, r.reason), r)
        lines = [
            f"  - {r.op_type} at {r.where}: {r.reason}; the lowest opset that has it is {r.lowest}"
            for r in list(seen.values())[:10]
        ]
        more = f"\n  ... and {len(seen) - 10} more" if len(seen) > 10 else ""
        ops = ", ".join(dict.fromkeys(r.op_type for r in refusals))
        super().__init__(
            f"Opset {target} has no form of {ops} ({len(refusals)} node(s)); the lowest "
            f"opset that has them is {self.lowest}:\n"
            + "\n".join(lines)
            + more
            + f"\nNext step: export at opset {self.lowest} or higher "
            f"(ExportOptions(opset_version={self.lowest}), CLI --opset {self.lowest}), or "
            "change the line(s) above to avoid the op."
        )


def _where(node: ir.Node) -> str:
    source = node.metadata_props.get("pkg.onnx_export.source")
    scope = (node.metadata_props.get("namespace") or "").removeprefix(": ")
    if source and scope:
        return f"{source} (in {scope})"
    return source or (f"module {scope}" if scope else "<unknown location>")


def _all_nodes(model: ir.Model) -> Iterator[ir.Node]:
    yield from list(model.graph.all_nodes())
    for function in model.functions.values():
        yield from list(function.all_nodes())


def _since(op_type: str, version: int) -> int | None:
    try:
        return int(onnx.defs.get_schema(op_type, version, "").since_version)
    except onnx.defs.SchemaError:
        return None


def _type_string(value: ir.Value) -> str | None:
    def name(t: ir.TypeProtocol) -> str | None:
        if isinstance(t, ir.TensorType):
            return f"tensor({t.dtype.name.lower()})"
        if isinstance(t, ir.SequenceType):
            inner = name(t.elem_type)
            return None if inner is None else f"seq({inner})"
        if isinstance(t, ir.OptionalType):
            inner = name(t.elem_type)
            return None if inner is None else f"optional({inner})"
        return None

    return None if value.type is None else name(value.type)


def _types_fit(node: ir.Node, version: int) -> str | None:
    """``None`` when ``node``'s value types are allowed at ``version``, else the misfit."""
    schema = onnx.defs.get_schema(node.op_type, version, "")
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for values, params in ((node.inputs, schema.inputs), (node.outputs, schema.outputs)):
        for i, value in enumerate(values):
            if value is None or not params:
                continue
            param = params[min(i, len(params) - 1)]
            if i >= len(params) and param.option != _VARIADIC:
                continue
            types = allowed.get(param.type_str)
            found = _type_string(value)
            if types is not None and found is not None and found not in types:
                return f"{found} for {param.name!r}"
    return None


def _lowest_for_types(node: ir.Node, target: int, source: int) -> int:
    for version in range(target + 1, source + 1):
        if _types_fit(node, version) is None:
            return version
    return source


def _lower(node: ir.Node, target: int, source: int) -> Refusal | None:
    """Rewrite ``node`` for ``target`` (through its table entry) and check its types."""
    if node.domain not in _DEFAULT_DOMAINS:
        return None  # com.microsoft and the user's domains keep their own versions
    version = node.version or source
    since = _since(node.op_type, version)
    if since is None or since <= target:
        return None
    lower = LOWERINGS.get(node.op_type)
    try:
        if lower is None:
            raise NoOlderForm(f"{node.op_type} appeared in opset {since}", since)
        lower(node, target)
    except NoOlderForm as e:
        return Refusal(node.op_type, _where(node), e.reason, max(e.lowest, target + 1))
    if node.graph is None:  # replaced by older ops
        return None
    node.version = None
    misfit = _types_fit(node, target)
    if misfit is None:
        return None
    return Refusal(node.op_type, _where(node), misfit, _lowest_for_types(node, target, source))


def _check(model: ir.Model) -> None:
    """``onnx.checker`` on the result when its weights are at hand (not placeholders)."""
    from onnx_export._fake import WeightPlaceholder

    weights = [v.const_value for v in model.graph.initializers.values()]
    if any(isinstance(w, WeightPlaceholder) for w in weights):
        return  # filled at save; the structure was checked node by node above
    if sum(w.nbytes for w in weights if w is not None) > _CHECKED_BYTES:
        return  # one protobuf holds 2 GB at most; the nodes were checked one by one
    if any(
        node.domain in _DEFAULT_DOMAINS and not onnx.defs.has(node.op_type)
        for node in model.graph.all_nodes()
    ):
        return  # ONNX Runtime's own ops in the default domain (target="onnxruntime")
    onnx.checker.check_model(ir.serde.serialize_model(model))


def downgrade_opset(model: ir.Model, target: int) -> ir.Model:
    """Return ``model`` converted to opset ``target`` (13 to 17), in place.

    Raises:
        OpsetDowngradeError: Some ops have no form at ``target``; the message names each
            with the user's line and the lowest opset that has it.
    """
    source = model.opset_imports.get("", target)
    if source <= target:
        return model
    if target < LOWEST_OPSET:
        raise ValueError(f"opset {target} is below the lowest supported, {LOWEST_OPSET}.")
    refusals = [r for node in _all_nodes(model) if (r := _lower(node, target, source))]
    if refusals:
        raise OpsetDowngradeError(target, refusals)
    for imports in (
        model.opset_imports,
        model.graph.opset_imports,
        *(f.opset_imports for f in model.functions.values()),
    ):
        for domain in _DEFAULT_DOMAINS:
            if domain in imports:
                imports[domain] = target
    _check(model)
    return model
