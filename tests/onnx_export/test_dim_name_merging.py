"""Two dynamic axes named differently that torch.export unifies: the second name is not
dropped in silence.

When the model requires two axes to be equal (it adds the inputs), torch.export gives them
one symbol and the ONNX graph one name, the first. Each unused name is a
``DimensionNameWarning`` at the user's call that says which name went into which and why,
an OXE0020 entry in the report, and one ``warning:`` line in the CLI.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.errors import DimensionNameWarning
from tests.helpers import assert_onnx_program_close


class Add(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


_SPECS = [
    pytest.param({"dynamic_shapes": {"x": {0: "batch"}, "y": {0: "batch2"}}}, id="names"),
    pytest.param({"dynamic_shapes": {"x": {0: Dim("batch")}, "y": {0: Dim("batch2")}}}, id="dims"),
    pytest.param({"dynamic_shapes": {"x": {0: Dim("batch")}, "y": {0: "batch2"}}}, id="mixed"),
    pytest.param({"dynamic_axes": {"x": {0: "batch"}, "y": {0: "batch2"}}}, id="dynamic_axes"),
]


def _messages(caught: Any) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DimensionNameWarning)]


@pytest.mark.parametrize("spec", _SPECS)
def test_an_unused_axis_name_is_a_warning_naming_both_axes(spec: dict[str, Any]) -> None:
    model, x, y = Add(), torch.randn(3, 4), torch.randn(3, 4)
    options = onnx_export.ExportOptions(**spec)
    with pytest.warns(DimensionNameWarning) as caught:
        program = onnx_export.dynamo_export(model, x, y, export_options=options)
    (message,) = _messages(caught)
    assert message.startswith("# The axis name: 'batch2' will not be used")  # torch.onnx's words
    assert "another axis: 'batch'" in message and "names both 'batch'" in message
    assert "y[0] always equal to x[0]" in message  # why: torch found them equal
    assert next(w for w in caught if w.category is DimensionNameWarning).filename == __file__
    assert [str(i.shape[0]) for i in program.model.graph.inputs] == ["batch", "batch"]
    entries = [d for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0020"]
    assert len(entries) == 1 and "y[0]" in entries[0].message
    for batch in (3, 6):
        assert_onnx_program_close(program, model, torch.randn(batch, 4), torch.randn(batch, 4))


def test_the_same_name_twice_made_up_names_or_independent_axes_do_not_warn() -> None:
    model, x, y = Add(), torch.randn(3, 4), torch.randn(3, 4)
    same = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}, "y": {0: "batch"}})

    class Independent(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.sum(0) + y.sum(0)

    apart = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "a"}, "y": {0: "b"}})
    unnamed = onnx_export.ExportOptions(dynamic_axes={"x": [0], "y": [0]})  # names made up
    with warnings.catch_warnings():
        warnings.simplefilter("error", DimensionNameWarning)
        program = onnx_export.dynamo_export(model, x, y, export_options=same)
        listed = onnx_export.dynamo_export(model, x, y, export_options=unnamed)
        other = onnx_export.dynamo_export(Independent(), x, torch.randn(5, 4), export_options=apart)
    assert_onnx_program_close(program, model, torch.randn(2, 4), torch.randn(2, 4))
    assert [str(i.shape[0]) for i in listed.model.graph.inputs] == ["x_dynamic_axes_1"] * 2
    assert_onnx_program_close(listed, model, torch.randn(5, 4), torch.randn(5, 4))
    assert [str(i.shape[0]) for i in other.model.graph.inputs] == ["a", "b"]
    assert_onnx_program_close(other, Independent(), torch.randn(2, 4), torch.randn(7, 4))


class Nested(nn.Module):
    def forward(self, x: torch.Tensor, ys: list[torch.Tensor], c: torch.Tensor) -> Any:
        return x + ys[0] + ys[1], c * 2


def test_names_in_nested_inputs_merge_into_the_first() -> None:
    spec = ({0: Dim("dim_x", min=3)}, [("ys_0",), (Dim.AUTO,)], {0: "c_0"})
    args = (torch.ones(5), [torch.zeros(5), torch.ones(5)], torch.ones(6))
    options = onnx_export.ExportOptions(dynamic_shapes=spec)
    with pytest.warns(DimensionNameWarning) as caught:
        program = onnx_export.dynamo_export(Nested(), *args, export_options=options)
    (message,) = _messages(caught)
    assert "'ys_0' will not be used" in message and "ys.0[0] always equal to x[0]" in message
    names = [str(i.shape[0]) for i in program.model.graph.inputs]
    assert names == ["dim_x", "dim_x", "dim_x", "c_0"]
    smaller = (torch.randn(4), [torch.randn(4), torch.randn(4)], torch.randn(7))
    assert_onnx_program_close(program, Nested(), *smaller)


_FACTORY = """
import torch


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def make():
    return Add(), (torch.randn(3, 4), torch.randn(3, 4))
"""


def test_cli_prints_the_unused_name_on_one_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from onnx_export.cli import main

    (tmp_path / "add_factory.py").write_text(_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "m.onnx"
    dynamic = ["--dynamic", "x:0=batch", "--dynamic", "y:0=batch2"]
    assert main(["export", "add_factory:make", "-o", str(out), *dynamic]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(lines) == 1 and "'batch2' will not be used" in lines[0] and "Traceback" not in err
    loaded = onnx_export.load(out)
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    torch.testing.assert_close(torch.as_tensor(loaded(x.numpy(), y.numpy())), x + y)
