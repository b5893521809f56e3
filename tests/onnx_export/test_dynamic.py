"""Dynamic shapes: both formats, named dims in the ONNX graph, runs at other sizes."""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx_ir as ir
import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.errors import DimensionNameWarning, StaticDimensionWarning
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


def _warnings(program: onnx_export.ONNXProgram, rule_id: str) -> list[str]:
    return [
        d.message
        for d in program.diagnostic_context.diagnostics
        if d.rule.id == rule_id and d.level.name == "WARNING"
    ]


def test_dim_tied_to_a_static_input_is_refused_or_made_static_with_a_warning() -> None:
    # ``mask`` is static while ``x`` says its batch is dynamic: the model ties them.
    # By default that is an error; with allow_static_fallback torch.export's fix (make x's
    # batch static) is applied, warned about and reported.
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    model = TwoInputs()
    with pytest.raises(onnx_export.CaptureError, match=r"x\[0\] \(dynamic\) is fixed to 2"):
        onnx_export.dynamo_export(model, *_inputs(2, 5), export_options=options)
    options = dataclasses.replace(options, allow_static_fallback=True)
    with pytest.warns(StaticDimensionWarning, match=r"x\[0\] was asked to be dynamic"):
        program = onnx_export.dynamo_export(model, *_inputs(2, 5), export_options=options)
    assert _dim_names(program.model.graph.inputs[0]) == [2, 5, 4]
    (warning,) = _warnings(program, "OXE0020")
    assert "x[0]" in warning and "dynamic -> static" in warning
    assert "static shape of 2" in warning or "specialized it to be a constant (2)" in warning
    assert_onnx_program_close(program, model, *_inputs(2, 5))


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features)


def test_dim_specialised_by_a_layer_keeps_the_other_names() -> None:
    model = Scale()
    options = onnx_export.ExportOptions(
        dynamic_shapes={"features": {0: "batch", 1: "feat"}}, allow_static_fallback=True
    )
    with pytest.warns(StaticDimensionWarning, match=r"features\[1\].*return self.linear"):
        program = onnx_export.dynamo_export(model, torch.randn(2, 8), export_options=options)
    assert _dim_names(program.model.graph.inputs[0]) == ["batch", 8]
    assert any("features[1]" in w for w in _warnings(program, "OXE0020"))
    assert_onnx_program_close(program, model, torch.randn(5, 8))


def test_related_torch_dims_are_tied_as_torch_suggests() -> None:
    class Add(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    shapes = {"x": {0: Dim("a")}, "y": {0: Dim("b")}}
    with pytest.warns(DimensionNameWarning, match=r"# The axis name: 'b' will not be used"):
        program = onnx_export.dynamo_export(
            Add(), torch.randn(2, 3), torch.randn(2, 3),
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )  # fmt: skip
    assert [_dim_names(v) for v in program.model.graph.inputs] == [["a", 3], ["a", 3]]
    assert any("Dim('b') -> Dim('a')" in w for w in _warnings(program, "OXE0020"))
    assert_onnx_program_close(program, Add(), torch.randn(4, 3), torch.randn(4, 3))


def test_size_one_example_on_a_dynamic_dim() -> None:
    torch.manual_seed(0)
    model = nn.Conv1d(2, 3, 3)
    options = onnx_export.ExportOptions(dynamic_shapes={"input": {0: "batch"}})
    program = onnx_export.dynamo_export(model, torch.randn(1, 2, 10), export_options=options)
    _assert_symbolic(program.model.graph.inputs[0], 0, "batch")
    for batch in (4, 1):
        assert_onnx_program_close(program, model, torch.randn(batch, 2, 10))


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        pytest.param({"x": {5: "batch"}}, "names axis 5, but the input has 3 axes", id="axis"),
        pytest.param({"x": {-4: "b"}}, "names axis -4, but the input has 3 axes", id="negative"),
        pytest.param({"x": {0: "a", -3: "b"}}, "names axis 0 twice", id="duplicate"),
        pytest.param({"x": {0: ""}}, "empty string", id="empty_name"),
        pytest.param({"x": ["a", "b"]}, "has 2 entries but the input has 3 axes", id="short"),
        pytest.param({"y": {0: "batch"}}, "inputs ['y'] that the model does not take", id="key"),
        pytest.param({"mask.0": {0: "batch"}}, "input 'mask' has no such leaf", id="path"),
    ],
)
def test_bad_dynamic_shapes_are_refused_before_capture(shapes: Any, message: str) -> None:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    with pytest.raises(onnx_export.ExportInputError, match=message.replace("[", r"\[")) as e:
        onnx_export.dynamo_export(TwoInputs(), *_inputs(2, 5), export_options=options)
    assert not any(d.rule.id == "OXE0001" for d in e.value.diagnostic_context.diagnostics)


class WithLists(nn.Module):
    def forward(self, x: torch.Tensor, extras: list[torch.Tensor], d: dict[str, Any]) -> Any:
        return x + extras[0] + d["k"]


def test_simple_form_with_nested_inputs_left_static_or_named_by_path() -> None:
    model = WithLists()
    args = (torch.randn(2, 3), [torch.randn(3)], {"k": torch.randn(3)})
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, *args, export_options=options)
    assert [_dim_names(v) for v in program.model.graph.inputs] == [["batch", 3], [3], [3]]
    args = (torch.randn(2, 3), [torch.randn(2, 3)], {"k": torch.randn(3)})
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch"}, "extras.0": {0: "batch"}}
    )
    program = onnx_export.dynamo_export(model, *args, export_options=options)
    assert _dim_names(program.model.graph.inputs[1]) == ["batch", 3]
    assert_onnx_program_close(
        program, model, torch.randn(5, 3), [torch.randn(5, 3)], {"k": torch.randn(3)}
    )


def test_keyword_inputs_through_var_kwargs_by_name() -> None:
    class Past(nn.Module):
        def forward(self, x: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
            return torch.cat([kwargs["past_key_values"], x], dim=1)

    model = Past()
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch", 1: "seq"}, "past_key_values": {0: "batch", 1: "past"}}
    )
    program = onnx_export.dynamo_export(
        model, torch.randn(2, 3), past_key_values=torch.randn(2, 4), export_options=options
    )
    assert _dim_names(program.model.graph.inputs[1]) == ["batch", "past"]
    assert_onnx_program_close(program, model, torch.randn(3, 1), past_key_values=torch.randn(3, 6))
    # The program takes the model's own call.
    x, past = torch.randn(2, 3), torch.randn(2, 4)
    torch.testing.assert_close(
        program.exported_program.module()(x, past_key_values=past), model(x, past_key_values=past)
    )


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param(_inputs(2, 5), {}, id="positional"),
        pytest.param(_inputs(2, 5)[:1], {"mask": _inputs(2, 5)[1]}, id="mixed"),
        pytest.param((), {"mask": _inputs(2, 5)[1], "x": _inputs(2, 5)[0]}, id="keywords"),
    ],
)
def test_exported_program_takes_the_models_call(args: Any, kwargs: Any) -> None:
    model = TwoInputs().eval()
    program = onnx_export.dynamo_export(model, *args, **kwargs)
    with torch.no_grad():
        torch.testing.assert_close(
            program.exported_program.module()(*args, **kwargs), model(*args, **kwargs)
        )
    assert [v.name for v in program.model.graph.inputs] == ["x", "mask"]  # adapter's order
    assert_onnx_program_close(program, model, *args, **kwargs)
    assert program.verify(*_inputs(2, 5)).ok


_FACTORY = """
import torch


class WithLists(torch.nn.Module):
    def forward(self, x, extras):
        return x + extras[0]


def make():
    return WithLists(), (torch.randn(2, 3), [torch.randn(2, 3)])
"""


@pytest.mark.parametrize(
    ("dynamic", "code", "expected"),
    [
        pytest.param(["x:0=n", "extras.0:0=n"], 0, ["n", 3], id="nested_path"),
        pytest.param(["x:-3=n"], 2, None, id="axis_out_of_range"),
    ],
)
def test_cli_dynamic_names_nested_leaves_and_refuses_bad_axes(
    dynamic: list[str],
    code: int,
    expected: list[Any] | None,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from onnx_export.cli import main

    (tmp_path / "lists_factory.py").write_text(_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    flags = [item for value in dynamic for item in ("--dynamic", value)]
    out = tmp_path / "m.onnx"
    assert main(["export", "lists_factory:make", "-o", str(out), *flags]) == code
    if expected is None:
        assert "names axis -3, but the input has 2 axes" in capsys.readouterr().err
        return
    model = ir.load(out)
    assert _dim_names(model.graph.inputs[1]) == expected
