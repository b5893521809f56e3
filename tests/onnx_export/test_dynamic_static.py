"""A dimension asked to be dynamic is never exported static without a word.

By default the export fails, naming the input and axis, the model's line that fixed the
size and torch.export's fix; with ``allow_static_fallback=True`` it is exported static
with one ``StaticDimensionWarning`` per dimension (and one stderr line in the CLI).
Deferred runtime asserts let a size computed from another axis stay dynamic.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.errors import StaticDimensionWarning
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class FixedBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        return y * torch.ones(2, 6)  # the batch is 2, whatever dynamic_shapes says


_SPECS = [
    pytest.param(lambda: {"x": {0: "batch"}}, id="simple"),
    pytest.param(lambda: {"x": {0: Dim("batch")}}, id="named_dim"),
    pytest.param(lambda: {"x": {0: Dim.DYNAMIC}}, id="dim_dynamic"),
]


@pytest.mark.parametrize("strategies", [("non_strict", "strict"), ("strict",)])
@pytest.mark.parametrize("make_spec", _SPECS)
def test_a_dynamic_dim_the_code_fixes_is_refused_by_default(
    make_spec: Any, strategies: Any
) -> None:
    options = onnx_export.ExportOptions(dynamic_shapes=make_spec(), capture_strategies=strategies)
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(FixedBatch(), torch.randn(2, 6), export_options=options)
    message = str(caught.value)
    assert "x[0]" in message and "fixed to 2" in message
    assert "test_dynamic_static.py:" in message and "return y * torch.ones(2, 6)" in message
    assert "suggested fix:" in message
    assert "allow_static_fallback=True" in message and "--allow-static" in message


@pytest.mark.parametrize("make_spec", _SPECS)
def test_allow_static_fallback_exports_static_and_warns(make_spec: Any) -> None:
    options = onnx_export.ExportOptions(dynamic_shapes=make_spec(), allow_static_fallback=True)
    model, x = FixedBatch(), torch.randn(2, 6)
    with pytest.warns(StaticDimensionWarning, match=r"x\[0\] was asked to be dynamic") as got:
        program = onnx_export.dynamo_export(model, x, export_options=options)
    assert len([w for w in got if issubclass(w.category, StaticDimensionWarning)]) == 1
    assert "return y * torch.ones(2, 6)" in str(got[0].message)
    assert got[0].filename == __file__  # located at the user's call
    assert list(program.model.graph.inputs[0].shape) == [2, 6]
    (static,) = next(a.made_static for a in program.capture_attempts if a.succeeded)
    assert (static.input, static.axis, static.size) == ("x", 0, 2)
    rules = [d.rule.id for d in program.diagnostic_context.diagnostics]
    assert "OXE0020" in rules
    assert_onnx_program_close(program, model, x)


class TiedToAnotherAxis(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(1), -1) * 2


@pytest.mark.parametrize("dim", [Dim("batch"), "batch"], ids=["named_dim", "simple"])
def test_a_size_from_another_axis_keeps_the_batch_dynamic(dim: Any) -> None:
    # Without deferred runtime asserts, torch.export fails: "Constraints violated (batch)!
    # ... guard L['x'].size()[0] % 6 != 0".
    model = TiedToAnotherAxis()
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: dim}})
    program = onnx_export.dynamo_export(model, torch.randn(4, 6, 3), export_options=options)
    assert str(program.model.graph.inputs[0].shape[0]) == "batch"
    for batch in (3, 7):
        assert_onnx_program_close(program, model, torch.randn(batch, 6, 3))


_FACTORY = """
import torch


class FixedBatch(torch.nn.Module):
    def forward(self, x):
        return x * torch.ones(2, 6)


def make():
    return FixedBatch(), (torch.randn(2, 6),)
"""


@pytest.mark.parametrize("allow", [False, True], ids=["refused", "allowed"])
def test_cli_refuses_or_warns_on_one_stderr_line(
    allow: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from onnx_export.cli import main

    (tmp_path / "fixed_factory.py").write_text(_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "m.onnx"
    flags = ["--allow-static"] if allow else []
    code = main(["export", "fixed_factory:make", "-o", str(out), "--dynamic", "x:0=b", *flags])
    err = capsys.readouterr().err
    if not allow:
        assert code == 1 and not out.exists()
        assert "x[0]" in err and "--allow-static" in err and "Traceback" not in err
        return
    assert code == 0
    lines = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(lines) == 1 and "x[0] was asked to be dynamic" in lines[0]
    assert "return x * torch.ones(2, 6)" in lines[0] and "Traceback" not in err
    loaded = onnx_export.load(out)
    x = torch.randn(2, 6)
    torch.testing.assert_close(torch.as_tensor(loaded(x.numpy())), x)


def test_shape_errors_say_the_export_made_the_axis_static(tmp_path: Any) -> None:
    from onnx_export.adapters import InputShapeError

    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "b"}}, allow_static_fallback=True)
    with pytest.warns(StaticDimensionWarning):
        program = onnx_export.dynamo_export(FixedBatch(), torch.randn(2, 6), export_options=options)
    loaded = onnx_export.load(program.save(tmp_path / "m.onnx"))
    other = torch.randn(3, 6)
    for call in (program, loaded, program.verify):
        with pytest.raises(InputShapeError, match="asked to be dynamic, but the model's code"):
            call(other)
    plain = onnx_export.dynamo_export(FixedBatch(), torch.randn(2, 6))  # static by choice
    with pytest.raises(InputShapeError, match="re-export with a dynamic dimension"):
        plain(other)
