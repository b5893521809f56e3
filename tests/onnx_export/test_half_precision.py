"""``ExportOptions(dtype=...)``: half-precision graphs, checked on the CPU.

The graphs' dtypes, the ops kept in float32, the ONNX checker, and their numbers in ONNX
Runtime's CPU provider against eager PyTorch in the same dtype (through the float32 upcast
where the CPU provider has no kernel). CUDA runs are ``bench/gpu_check.py``'s.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from torch import nn

import onnx_export
from onnx_export.adapters import AdapterSpec, InputDtypeError, LeafSpec, TensorSpec
from onnx_export.adapters.input_steps import CastInputs
from onnx_export.errors import ExportInputError
from onnx_export.passes.half_precision import FLOAT32_OPS, compute_in_float32

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class Block(nn.Module):
    """Linear, LayerNorm, softmax and a mean: every kind of op the option treats."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(self.norm(self.linear(x)), dim=-1)
        return y.mean(-1, keepdim=True) + ids.unsqueeze(-1)


def _export(dtype: object, **options: object) -> onnx_export.ONNXProgram:
    torch.manual_seed(0)
    x, ids = torch.randn(2, 4, 8), torch.arange(8).reshape(2, 4)
    export_options = onnx_export.ExportOptions(dtype=dtype, **options)  # type: ignore[arg-type]
    return onnx_export.dynamo_export(Block().eval(), x, ids, export_options=export_options)


def _elem(value: ir.Value) -> ir.DataType | None:
    return value.dtype


@pytest.mark.parametrize(
    ("given", "name"),
    [("float16", "float16"), (torch.float16, "float16"), (torch.bfloat16, "bfloat16")],
    ids=["name", "torch.float16", "torch.bfloat16"],
)
def test_dtype_option_takes_names_and_torch_dtypes(given: object, name: str) -> None:
    assert onnx_export.ExportOptions(dtype=given).dtype == name  # type: ignore[arg-type]


def test_dtype_option_refuses_other_dtypes() -> None:
    with pytest.raises(ValueError, match=r"dtype must be 'float16' or 'bfloat16'.*got torch\.int8"):
        onnx_export.ExportOptions(dtype=torch.int8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dtype", "onnx_type"),
    [("float16", ir.DataType.FLOAT16), ("bfloat16", ir.DataType.BFLOAT16)],
)
def test_half_graph_dtypes_and_float32_ops(dtype: str, onnx_type: ir.DataType) -> None:
    program = _export(dtype)
    graph = program.model.graph
    assert [_elem(v) for v in graph.inputs] == [onnx_type, ir.DataType.INT64]
    assert _elem(graph.outputs[0]) == onnx_type
    weights = [v for v in graph.initializers.values() if v.dtype is not None]
    assert weights and all(v.dtype == onnx_type for v in weights if v.dtype.is_floating_point())
    kept = [n for n in graph if n.op_type in FLOAT32_OPS]
    assert {n.op_type for n in kept} == {"Softmax", "ReduceMean"}
    for node in kept:  # float32 in and out, between Casts from and back to the half dtype
        assert node.inputs[0].dtype == ir.DataType.FLOAT == node.outputs[0].dtype
        assert node.inputs[0].producer().op_type == "Cast"
        assert all(u.node.op_type == "Cast" for u in node.outputs[0].uses())
    norm = next(n for n in graph if n.op_type == "LayerNormalization")
    stash = norm.attributes.get("stash_type")
    assert stash is None or stash.as_int() == 1  # float32 statistics, by itself
    onnx.checker.check_model(ir.to_proto(program.model), full_check=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_numbers_match_eager_in_the_same_dtype(dtype: str, tmp_path: pathlib.Path) -> None:
    _export(dtype).save(tmp_path / "model.onnx")
    # ORT's CPU provider runs these float16 ops; it lacks bfloat16 kernels: upcast path
    program = onnx_export.load(
        tmp_path / "model.onnx", upcast=[dtype] if dtype == "bfloat16" else []
    )
    torch.manual_seed(1)
    x, ids = torch.randn(2, 4, 8), torch.arange(8).reshape(2, 4)
    torch.manual_seed(0)
    eager = Block().eval().to(getattr(torch, dtype))
    with torch.no_grad():
        want = eager(x.to(eager.linear.weight.dtype), ids)
    got = program(x, ids)  # float32 x: cast to the half dtype by the adapter
    assert got.dtype == want.dtype
    tolerance = 1e-2 if dtype == "float16" else 5e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tolerance, atol=tolerance)


def test_model_given_is_left_as_it_was() -> None:
    model = Block().eval()
    options = onnx_export.ExportOptions(dtype="float16")
    onnx_export.dynamo_export(
        model, torch.randn(1, 2, 8), torch.zeros(1, 2), export_options=options
    )
    assert model.linear.weight.dtype == torch.float32


def test_adapter_takes_float32_and_the_half_dtype_and_refuses_others() -> None:
    program = _export("float16")
    spec = program.adapter_spec
    assert spec.inputs[0].tensor is not None and spec.inputs[0].tensor.cast_from == ("float32",)
    assert spec.inputs[1].tensor is not None and spec.inputs[1].tensor.cast_from == ()
    assert AdapterSpec.from_json(spec.to_json()) == spec
    ids = np.arange(8).reshape(2, 4)
    x = np.random.default_rng(0).standard_normal((2, 4, 8))
    from_float32 = program(x.astype(np.float32), ids)
    from_float16 = program(x.astype(np.float16), ids)
    assert from_float32.dtype == np.float16
    np.testing.assert_array_equal(from_float32, from_float16)
    with pytest.raises(InputDtypeError, match=r"expected dtype float16 \(or float32, cast"):
        program(x, ids)  # float64 is not one the export takes


def test_cast_step_casts_torch_tensors_on_their_device() -> None:
    spec = TensorSpec("x", "bfloat16", ("n",), cast_from=("float32",))
    step = CastInputs([LeafSpec("x", "tensor", tensor=spec)])
    out = step([torch.ones(3)])
    assert isinstance(out[0], torch.Tensor) and out[0].dtype == torch.bfloat16
    assert step([torch.ones(3, dtype=torch.float64)])[0].dtype == torch.float64  # left to check


def test_cast_from_must_be_another_float_dtype() -> None:
    from onnx_export.adapters import AdapterSpecError

    with pytest.raises(AdapterSpecError, match="cast_from"):
        AdapterSpec.from_json(
            _export("float16").adapter_spec.to_json().replace('"float32"', '"int64"')
        )


def test_exported_program_with_dtype_is_refused() -> None:
    program = torch.export.export(Block().eval(), (torch.randn(1, 2, 8), torch.zeros(1, 2)))
    options = onnx_export.ExportOptions(dtype="float16")
    with pytest.raises(ExportInputError, match="already captured"):
        onnx_export.dynamo_export(program, export_options=options)


def test_pass_leaves_float32_graphs_alone() -> None:
    program = onnx_export.dynamo_export(Block().eval(), torch.randn(1, 2, 8), torch.zeros(1, 2))
    assert compute_in_float32(program.model) == 0


def test_saved_half_model_loads_and_runs(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "half.onnx"
    _export("float16").save(path)
    module = onnx_export.load(path)
    out = module(np.ones((2, 4, 8), np.float32), np.zeros((2, 4), np.int64))
    assert out.dtype == np.float16 and out.shape == (2, 4, 1)


@pytest.mark.parametrize("target", ["onnx", "onnxruntime"])
def test_half_bert_verifies_and_fuses_for_onnxruntime(target: str) -> None:
    """``verify=True`` compares within float16's rounding over the model; ORT's fusions
    (Attention, SkipLayerNormalization, BiasGelu) take the float16 graph as they are."""
    tf = pytest.importorskip("transformers")
    config = tf.BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
    )
    torch.manual_seed(0)
    model = tf.BertModel(config).eval()
    ids, mask = torch.randint(0, 100, (2, 16)), torch.ones(2, 16, dtype=torch.long)
    options = onnx_export.ExportOptions(dtype="float16", target=target, verify=True)  # type: ignore[arg-type]
    program = onnx_export.dynamo_export(model, ids, mask, export_options=options)
    ops = {n.op_type for n in program.model.graph}
    if target == "onnxruntime":
        assert {"Attention", "SkipLayerNormalization"} <= ops, ops
    else:
        assert "Softmax" in ops
    assert program(ids, mask)["last_hidden_state"].dtype == torch.float16
