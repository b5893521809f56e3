"""The faster translation and optimizer of #39 give the very same graphs.

Each speed-up has a reference: the code path it replaced (onnxscript's per-node inference
and attribute conversion in the graph builder, the folder's own inference, every rewrite
rule called at every node, the node removal after each rewrite). The bench's family
stand-ins (``bench/family_standins.py``) are exported both ways in one process and the
saved files must be byte for byte the same: nodes, names, attributes, value types and
shapes, initializers and metadata. The unit tests below hold each piece to its reference
on the cases the exports do not reach (errors, unusual attribute values).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
import torch
from onnx_ir import _convenience
from onnxscript._internal import _inference as onnxscript_inference
from onnxscript._internal import tape_builder
from onnxscript.optimizer import _constant_folding
from onnxscript.rewriter import RewritePass

import onnx_export
from onnx_export.capture._call import forward_signature, prepare_call
from onnx_export.capture._resize import resized_call
from onnx_export.passes import _inference, optimize
from onnx_export.program._served_axes import declared_multiples, declared_ranges
from onnx_export.translation import _builder
from onnx_export.translation._builder import TaggingGraphBuilder

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def _standins() -> ModuleType:
    spec = importlib.util.spec_from_file_location("family_standins", _BENCH / "family_standins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("family_standins", module)
    spec.loader.exec_module(module)
    return module


def _reference_rewrite(self: Any, model: ir.Model) -> ir.passes.PassResult:
    """onnxscript's RewritePass with every rule, at every node (before #39)."""
    self.removed_unused = False  # so the cleanup removes unused nodes after it, as before
    return RewritePass(list(optimize._linear_rules()))(model)


def _reference_fold_inference(self: Any, node: ir.Node) -> None:
    """The folder's inference before #39: onnxscript's, for nodes not fully known."""
    if not all(optimize._known(value) for value in node.outputs):
        _constant_folding.FoldConstantsPass._do_inference(self, node)


def _reference_paths(patch: pytest.MonkeyPatch) -> None:
    """The code paths the speed-ups replaced."""
    builder = tape_builder.BuilderBase
    for method in ("_infer_shapes", "_cast_attributes", "_get_schema", "_constant_propagation"):
        patch.setattr(TaggingGraphBuilder, method, getattr(builder, method))
    patch.setattr(_builder, "_Answers", lambda flags: flags)  # enum.Flag's own ``&``
    patch.setattr(optimize._FoldConstantsPass, "_do_inference", _reference_fold_inference)
    patch.setattr(optimize._PrunedRewritePass, "call", _reference_rewrite)


def _export(name: str, path: Path) -> bytes:
    model, (args, kwargs), shapes = _standins().build(name)
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnx_export.dynamo_export(model, *args, export_options=options, **kwargs)
    ours = [str(w.message) for w in caught if w.category.__module__ == "onnx_export.errors"]
    assert not ours  # the export's checks (parity, second size, edges) found nothing
    # The export's own checks ran ONNX Runtime against eager PyTorch at the example, at a
    # second size of each dynamic axis and at the edges; once more here, at the example.
    with torch.no_grad():
        expected = model(*args, **kwargs)
    torch.testing.assert_close(program(*args, **kwargs), expected, rtol=1e-3, atol=1e-4)
    # And at other sizes of every dynamic axis, within what the file declares.
    other_args, other_kwargs = _other_sizes(name, model, args, kwargs, options, program)
    with torch.no_grad():
        expected = model(*other_args, **other_kwargs)
    got = program(*other_args, **other_kwargs)
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4)
    return program.save(path).read_bytes()


def _other_sizes(
    name: str, model: Any, args: Any, kwargs: Any, options: Any, program: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if name == "graph/gnn":  # edge_index holds node numbers: below the new node count
        return (torch.randn(70, 32), torch.randint(0, 70, (2, 301))), {}
    call = prepare_call(model, forward_signature(model), args, kwargs, options)
    spec = program.adapter_spec
    other = resized_call(call, ranges=declared_ranges(spec), multiples=declared_multiples(spec))
    assert other is not None
    return other.call.args, other.call.kwargs


# UNet2DCondition, SAM's ViT, YOLO (Conv/BN/Pad rules) and a GNN (scatter, dynamic sizes):
# the families whose translation and optimizer #39 measured.
@pytest.mark.parametrize(
    "name", ["diffusion/unet2d_cond", "sam/vit_encoder", "detection/yolo", "graph/gnn"]
)
def test_the_faster_paths_save_the_same_file(name: str, tmp_path: Path) -> None:
    fast = _export(name, tmp_path / "fast.onnx")
    with pytest.MonkeyPatch.context() as patch:
        _reference_paths(patch)
        reference = _export(name, tmp_path / "reference.onnx")
    assert fast == reference


def test_the_rewrite_rules_are_called_once_a_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """One dispatching rule per rewrite pass, and the matcher only where inputs can match."""
    tried: list[str] = []
    dispatch = optimize._ByRootOp.try_rewrite

    def counting(self: Any, model: Any, graph: Any, node: ir.Node, **kwargs: Any) -> Any:
        tried.append(node.op_type)
        return dispatch(self, model, graph, node, **kwargs)

    monkeypatch.setattr(optimize._ByRootOp, "try_rewrite", counting)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    relu = ir.Node("", "Relu", [x])
    transpose = ir.Node(
        "", "Transpose", [relu.outputs[0]], attributes=[ir.AttrInt64s("perm", [1, 0])]
    )
    transpose2 = ir.Node(
        "", "Transpose", [transpose.outputs[0]], attributes=[ir.AttrInt64s("perm", [1, 0])]
    )
    transpose2.outputs[0].name = "y"
    graph = ir.Graph(
        [x], [transpose2.outputs[0]], nodes=[relu, transpose, transpose2], opset_imports={"": 18}
    )
    model = ir.Model(graph, ir_version=10)
    optimize.optimize_model(model)
    # Transpose(Transpose(x)) with inverse perms is x: the rule matched through the dispatch.
    assert [node.op_type for node in model.graph] == ["Relu"]
    assert tried.count("Relu") <= 2 and tried.count("Transpose") >= 1


# -- pieces held to their references ---------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        0,
        7,
        True,
        False,
        1.5,
        "mode",
        [1, 2],
        (3, True),
        [0.5, 2.0],
        ["a", "b"],
        (1.0,),
        ir.tensor(np.arange(3, dtype=np.float32)),
        [],
        [1, 2.0],
        np.int64(3),
        np.float32(2.0),
        ir.AttrInt64("same", 3),
    ],
)
def test_fast_attributes_are_onnx_irs(value: Any) -> None:
    name = "same"

    def attribute(given: Any) -> tuple[Any, ...]:
        try:
            made = _convenience.convert_attribute(name, given)
        except TypeError as error:  # mixed lists, numpy scalars: onnx_ir refuses them
            return (str(error),)
        return made.name, made.type, repr(made.value)

    assert attribute(_inference.fast_attributes({name: value})[name]) == attribute(value)


def _node(op: str, inputs: list[ir.Value | None], **attrs: Any) -> ir.Node:
    node = ir.Node("", op, inputs, attributes=_convenience.convert_attributes(attrs), version=18)
    for i, output in enumerate(node.outputs):
        output.name = f"{op.lower()}_{i}"
    return node


def _value(name: str, dtype: ir.DataType | None, shape: list[Any] | None) -> ir.Value:
    return ir.Value(
        name=name,
        type=ir.TensorType(dtype) if dtype is not None else None,
        shape=ir.Shape(shape) if shape is not None else None,
    )


def _cases() -> list[ir.Node]:
    f = ir.DataType.FLOAT
    shape = ir.Value(name="shape", const_value=ir.tensor(np.array([3, -1], dtype=np.int64)))
    shape.type, shape.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([2])
    return [
        _node("Add", [_value("a", f, ["batch", 4]), _value("b", f, [1, 4])]),
        _node("MatMul", [_value("a", f, ["batch", "seq", 8]), _value("w", f, [8, 16])]),
        _node("Reshape", [_value("a", f, [6, 2]), shape]),
        _node("Transpose", [_value("a", f, [2, 3, 4])], perm=[2, 0, 1]),
        _node("Add", [_value("a", f, [2, 3]), _value("b", f, [4, 5])]),  # inference refuses
        _node("Relu", [_value("untyped", None, None)]),  # no type: onnxscript's error
        _node("Relu", [_value("", f, [2])]),  # no name
        _node("Concat", [_value("a", f, [2, 3]), None], axis=0),
        _node("Cast", [_value("a", f, [None, 3])], to=int(ir.DataType.INT64)),
    ]


def _outcome(node: ir.Node) -> list[Any]:
    return [
        [(o.name, repr(o.type), repr(o.shape)) for o in node.outputs],
        dict(node.metadata_props),
    ]


@pytest.mark.parametrize("index", range(len(_cases())))
def test_infer_outputs_is_onnxscripts(index: int) -> None:
    ours, theirs = _cases()[index], _cases()[index]
    _inference.infer_outputs(ours)
    onnxscript_inference.infer_outputs(theirs)
    assert _outcome(ours) == _outcome(theirs)
    _inference.infer_outputs(ours)  # a second time (cached protos) merges the same way
    onnxscript_inference.infer_outputs(theirs)
    assert _outcome(ours) == _outcome(theirs)


def test_the_cached_shape_is_never_a_values() -> None:
    first, second = _cases()[0], _cases()[0]
    _inference.infer_outputs(first)
    _inference.infer_outputs(second)
    assert first.outputs[0].shape is not second.outputs[0].shape
    assert first.outputs[0].type is not second.outputs[0].type
    first.outputs[0].shape[1] = 5  # type: ignore[index]  # a shape of its own, writable
    assert second.outputs[0].shape == ir.Shape(["batch", 4])
