"""The translation stage as the pipeline calls it: an ``ExportedProgram`` in, a model out.

It checks that every FX node has an ONNX function (all missing ones at once), names the
graph's inputs, outputs and symbolic dims after the user's model, and translates. It
records nothing itself: the pipeline hands its values (decisions, the unsupported nodes,
a failed node) to the reporting stage.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from onnx_export._dtypes import PACKED_X2
from onnx_export.errors import (
    ConversionError,
    ExportInputError,
    UnsupportedOpInputError,
    UnsupportedOpsError,
)
from onnx_export.translation._dtype_mix import check_dtype_mix
from onnx_export.translation._naming import (
    check_int_bounds,
    dim_names_from_program,
    graph_names,
)
from onnx_export.translation._translate import (
    NodeTranslationError,
    TranslationResult,
    UnsupportedNode,
    translate,
)

__all__ = ["conversion_error", "translate_program", "unsupported_error"]


def unsupported_error(unsupported: Sequence[UnsupportedNode]) -> UnsupportedOpsError:
    """One error that lists every FX node without an ONNX function, at its source line."""
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


#: Our internal types as the user should read them in a message.
_INTERNAL_NAMES = (
    (
        re.compile(r"<class '[\w.]*RecordedValue'>|'RecordedValue'|\bRecordedValue\b"),
        "a graph value",
    ),
)


def _user_words(text: str) -> str:
    for pattern, words in _INTERNAL_NAMES:
        text = pattern.sub(words, text)
    return text


def _symbolic_constant(node: torch.fx.Node, function: str) -> str | None:
    """Why a function that takes a ``Scalar`` as a constant cannot take the node's (or None)."""
    from onnx_export.translation._symbolic_scalars import symbolic_scalar_positions

    names = sorted(symbolic_scalar_positions(node))
    if not names:
        return None
    which = ", ".join(repr(n) for n in names)
    return (
        f"{node.target} takes {which} as a constant (an ONNX attribute of {function}), and "
        f"the model computes it from input sizes that are dynamic. Next steps: compute it "
        f"from Python numbers (the config, a constant), or keep those sizes static."
    )


def conversion_error(error: NodeTranslationError) -> ConversionError:
    """The user's error for one FX node whose ONNX function failed.

    The user's own function: the user fixes it. A built-in one (ours or torchlib's): our
    bug, said so, with the op and the user's line, and internal types named in user words.
    """
    decision = error.decision
    entry = decision.entry if decision else None
    function = entry.name if entry else "-"
    cause = error.__cause__
    origin = error.origin
    module = (
        f" in module {origin.module_path!r} ({origin.module_class})" if origin.module_path else ""
    )
    head = (
        f"Translating FX node {error.node.name!r} ({error.node.target}) at {origin.where}{module}"
    )
    what = _user_words(f"{type(cause).__name__}: {str(cause).rstrip('.')}")
    if isinstance(cause, UnsupportedOpInputError):  # the op library's limits carry their step
        return ConversionError(f"{head} with {function} failed: {str(cause).rstrip('.')}.")
    if entry is not None and entry.is_custom:
        return ConversionError(
            f"{head} with your registered function {function} failed: {what}. Next steps: "
            f"fix {function} (it receives the node's arguments as ONNX values), or "
            f"unregister it to use the built-in one."
        )
    constant = _symbolic_constant(error.node, function)
    if constant is not None:
        return ConversionError(f"{head}: {constant}")
    origin_name = entry.origin if entry is not None else "onnx-export"
    return ConversionError(
        f"{head}: {origin_name}'s function {function} failed ({what}). This is a bug in "
        f"onnx-export, not in your model. Next steps: report it with the SARIF report; "
        f"until it is fixed, writing that line with other operators avoids {function}."
    )


_FLOAT4_OPSET = 23  # ONNX's FLOAT4E2M1 appears in opset 23


def _float4_node(program: ExportedProgram) -> Any:
    """The first FX node whose value is a ``float4_e2m1fn_x2`` tensor, or None."""
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype in PACKED_X2:
            return node
    return None


def required_opset(program: ExportedProgram) -> int | None:
    """The lowest opset that can hold the program's dtypes, where the default cannot."""
    return _FLOAT4_OPSET if _float4_node(program) is not None else None


def _check_float4_opset(program: ExportedProgram, opset_version: int) -> None:
    """Refuse ``float4_e2m1fn_x2`` tensors below opset 23, which has no op that takes them."""
    if opset_version >= _FLOAT4_OPSET:
        return
    node = _float4_node(program)
    if node is not None:
        raise ConversionError(
            f"The model has {node.meta['val'].dtype} tensors (FX node {node.name!r}), which "
            f"ONNX has as FLOAT4E2M1 from opset {_FLOAT4_OPSET} on; opset {opset_version} "
            f"has no op that takes them. Export with "
            f"ExportOptions(opset_version={_FLOAT4_OPSET}) (CLI: --opset {_FLOAT4_OPSET})."
        )


def translate_program(
    program: ExportedProgram,
    decisions: Any,
    module: torch.nn.Module,
    user_dynamic: Any,
    opset_version: int = 18,
    target: str = "onnx",
) -> TranslationResult:
    """Translate ``program`` with the dispatch ``decisions`` already made for its nodes.

    Raises:
        ExportInputError: A bounded ``Dim`` on a Python int that the model narrows.
        NodeTranslationError: One node's ONNX function failed (see ``conversion_error``).
        ConversionError: The graph uses something ONNX export does not support.
    """
    _check_float4_opset(program, opset_version)
    check_dtype_mix(program)
    paths, input_names, output_names = graph_names(module, program)
    names = user_dynamic.names if user_dynamic is not None else None
    try:
        check_int_bounds(program, names, paths)
    except ValueError as e:
        raise ExportInputError(f"{e}") from e
    dim_names = dim_names_from_program(program, names, paths)
    try:
        result = translate(
            program,
            decisions,
            input_names=input_names,
            output_names=output_names,
            dim_names=dim_names.by_symbol,
            opset_version=opset_version,
            target=target,
        )
    except NotImplementedError as e:
        raise ConversionError(
            f"This graph uses something ONNX export does not support: {e}."
        ) from e
    return dataclasses.replace(result, merged_dim_names=dim_names.merged)
