"""Dynamic shapes: both formats, named dims in the ONNX graph, runs at other sizes."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.linear(x))  # (batch, seq, 3)
        scores = h @ h.transpose(1, 2)  # (batch, seq, seq)
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        return scores.softmax(-1) @ h


def _inputs(batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch, seq, 4)
    mask = torch.ones(batch, seq, dtype=torch.bool)
    mask[:, -1] = False
    return x, mask


def _dim_names(value: ir.Value) -> list[Any]:
    assert value.shape is not None, f"input {value.name} has no shape"
    return [d.value if isinstance(d, ir.SymbolicDim) else d for d in value.shape]


def _assert_symbolic(value: ir.Value, axis: int, name: str) -> None:
    dim = value.shape[axis]  # type: ignore[index]
    assert isinstance(dim, ir.SymbolicDim), f"{value.name}[{axis}] is {dim!r}, not symbolic"
    assert dim.value == name, f"{value.name}[{axis}] is named {dim.value!r}, expected {name!r}"


def _batch_seq_torch_dict() -> Any:
    batch, seq = Dim("batch"), Dim("seq")
    return {"x": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}}


def _batch_seq_torch_dict_separate_dims() -> Any:
    # Distinct Dim objects with the same name are the same dimension for torch.export.
    return {"x": {0: Dim("batch"), 1: Dim("seq")}, "mask": {0: Dim("batch"), 1: Dim("seq")}}


def _batch_seq_simple() -> Any:
    return {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}


def _batch_seq_simple_lists() -> Any:
    return {"x": ["batch", "seq", None], "mask": ("batch", "seq")}


def _batch_seq_torch_tuple() -> Any:
    batch, seq = Dim("batch"), Dim("seq")
    return ({0: batch, 1: seq}, {0: batch, 1: seq})


@pytest.mark.parametrize(
    "make_shapes",
    [
        pytest.param(_batch_seq_simple, id="simple_dict"),
        pytest.param(_batch_seq_simple_lists, id="simple_lists"),
        pytest.param(_batch_seq_torch_dict, id="torch_dims_shared"),
        pytest.param(_batch_seq_torch_dict_separate_dims, id="torch_dims_by_name"),
        pytest.param(
            _batch_seq_torch_tuple,
            id="torch_dims_tuple",
        ),
    ],
)
def test_named_dims_in_graph_and_other_sizes_run(make_shapes: Any) -> None:
    torch.manual_seed(0)
    model = TwoInputs().eval()
    options = onnx_export.ExportOptions(dynamic_shapes=make_shapes())
    program = onnx_export.dynamo_export(model, *_inputs(2, 5), export_options=options)

    inputs = list(program.model.graph.inputs)
    assert [v.name for v in inputs] == ["x", "mask"]
    for value in inputs:
        _assert_symbolic(value, 0, "batch")
        _assert_symbolic(value, 1, "seq")
    assert _dim_names(inputs[0]) == ["batch", "seq", 4]
    assert _dim_names(inputs[1]) == ["batch", "seq"]
    assert _dim_names(program.model.graph.outputs[0]) == ["batch", "seq", 3]

    for batch, seq in [(3, 7), (1, 2)]:
        assert_onnx_program_close(program, model, *_inputs(batch, seq), atol=1e-5)


def test_auto_dims_stay_symbolic_and_run() -> None:
    torch.manual_seed(0)
    model = TwoInputs().eval()
    shapes = {"x": (Dim.AUTO, Dim.AUTO, Dim.STATIC), "mask": (Dim.AUTO, Dim.AUTO)}
    program = onnx_export.dynamo_export(
        model, *_inputs(2, 5), export_options=onnx_export.ExportOptions(dynamic_shapes=shapes)
    )
    x, mask = program.model.graph.inputs
    assert isinstance(x.shape[0], ir.SymbolicDim) and isinstance(x.shape[1], ir.SymbolicDim)
    assert x.shape[2] == 4
    # Both inputs share their batch and sequence symbols.
    assert x.shape[0].value == mask.shape[0].value
    assert x.shape[1].value == mask.shape[1].value
    for batch, seq in [(4, 3), (1, 9)]:
        assert_onnx_program_close(program, model, *_inputs(batch, seq))


def test_static_export_has_fixed_dims() -> None:
    model = TwoInputs().eval()
    program = onnx_export.dynamo_export(model, *_inputs(2, 5))
    assert _dim_names(program.model.graph.inputs[0]) == [2, 5, 4]
    assert _dim_names(program.model.graph.inputs[1]) == [2, 5]
    assert_onnx_program_close(program, model, *_inputs(2, 5))


class Nested(nn.Module):
    def forward(self, x: torch.Tensor, extra: dict[str, Any]) -> torch.Tensor:
        return x + extra["a"] * extra["b"][0]


@pytest.mark.parametrize(
    "shapes",
    [
        pytest.param(
            {"x": {0: "batch"}, "extra": {"a": {0: "batch"}, "b": [{0: "batch"}]}}, id="simple"
        ),
        pytest.param(
            {
                "x": {0: Dim("batch")},
                "extra": {"a": {0: Dim("batch")}, "b": [{0: Dim("batch")}]},
            },
            id="torch",
        ),
    ],
)
def test_nested_inputs_named_dims(shapes: Any) -> None:
    model = Nested()

    def make(n: int) -> tuple[torch.Tensor, dict[str, Any]]:
        return torch.randn(n, 3), {"a": torch.randn(n, 3), "b": [torch.randn(n, 3)]}

    program = onnx_export.dynamo_export(
        model, *make(2), export_options=onnx_export.ExportOptions(dynamic_shapes=shapes)
    )
    inputs = list(program.model.graph.inputs)
    assert [v.name for v in inputs] == ["x", "extra.a", "extra.b.0"]
    for value in inputs:
        _assert_symbolic(value, 0, "batch")
    for n in (5, 1):
        assert_onnx_program_close(program, model, *make(n))


def test_dim_name_that_is_not_an_identifier_is_kept() -> None:
    model = Nested()
    shapes = {"x": {0: "batch size"}, "extra": {"a": {0: "batch size"}, "b": [{0: "batch size"}]}}
    x, extra = torch.randn(2, 3), {"a": torch.randn(2, 3), "b": [torch.randn(2, 3)]}
    program = onnx_export.dynamo_export(
        model, x, extra, export_options=onnx_export.ExportOptions(dynamic_shapes=shapes)
    )
    _assert_symbolic(program.model.graph.inputs[0], 0, "batch size")
    assert_onnx_program_close(
        program, model, torch.randn(4, 3), {"a": torch.randn(4, 3), "b": [torch.randn(4, 3)]}
    )


def test_derived_dim_runs_at_other_sizes() -> None:
    class Cat(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, y], dim=0).cumsum(0)

    batch = Dim("batch")
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: batch}, "y": {0: 2 * batch}})
    model = Cat()
    program = onnx_export.dynamo_export(
        model, torch.randn(2, 3), torch.randn(4, 3), export_options=options
    )
    _assert_symbolic(program.model.graph.inputs[0], 0, "batch")
    for n in (3, 5):
        assert_onnx_program_close(program, model, torch.randn(n, 3), torch.randn(2 * n, 3))


def test_unknown_input_name_in_simple_form_is_rejected() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"not_an_input": {0: "batch"}, "x": None})
    with pytest.raises((ValueError, onnx_export.OnnxExportError)) as caught:
        onnx_export.dynamo_export(TwoInputs(), *_inputs(2, 5), export_options=options)
    # The exporter may wrap the ValueError in its own error; the cause stays a ValueError.
    error = caught.value
    root = error if isinstance(error, ValueError) else error.__cause__
    assert isinstance(root, ValueError), repr(error)
    assert "not_an_input" in str(error)
    assert "['x', 'mask']" in str(error)  # the inputs forward() does take


def test_specialised_named_dim_fails_capture() -> None:
    # ``mask`` is static while ``x`` says its batch is dynamic: the model ties them, so
    # torch.export refuses; the exporter reports it as a CaptureError.
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    with pytest.raises(onnx_export.CaptureError, match="batch"):
        onnx_export.dynamo_export(TwoInputs(), *_inputs(2, 5), export_options=options)
