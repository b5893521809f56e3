"""Every ``dynamic_shapes`` form torch.export accepts is accepted here and means the same.

``Dim.STATIC``, ``Dim.AUTO``, ``Dim.DYNAMIC`` and ``None`` on any leaf kind (tensors,
lists, dicts, Python scalars), named ``Dim``s with bounds and derived dims. Each export
runs in ONNX Runtime against eager, at the example's sizes and at other sizes where the
dimension is dynamic.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


def _export(model: nn.Module, *args: Any, shapes: Any) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    return onnx_export.dynamo_export(model, *args, export_options=options)


def _dims(program: onnx_export.ONNXProgram, index: int = 0) -> list[Any]:
    shape = program.model.graph.inputs[index].shape
    assert shape is not None
    return [d if isinstance(d, int) else "sym" for d in shape]


class Scaled(nn.Module):
    def forward(self, x: torch.Tensor, scale: int) -> torch.Tensor:
        return x.softmax(-1) * scale


@pytest.mark.parametrize("spec", [Dim.STATIC, None], ids=["static", "none"])
def test_python_scalar_takes_static_forms(spec: Any) -> None:  # Dim.AUTO: test_dynamic_ints
    model = Scaled()
    program = _export(model, torch.randn(2, 3), 5, shapes={"x": {0: "batch"}, "scale": spec})
    assert _dims(program) == ["sym", 3]
    for batch in (1, 4):
        assert_onnx_program_close(program, model, torch.randn(batch, 3), 5)


def test_python_int_marked_dynamic_is_an_input() -> None:
    model = Scaled()
    program = _export(model, torch.randn(2, 3), 5, shapes={"x": None, "scale": Dim.DYNAMIC})
    assert [v.name for v in program.model.graph.inputs] == ["x", "scale"]
    for scale in (5, 3):
        assert_onnx_program_close(program, model, torch.randn(2, 3), scale)


def test_python_float_marked_dynamic_is_refused_with_what_to_do() -> None:
    with pytest.raises(onnx_export.ExportInputError, match="pass it as a 0-d tensor"):
        _export(Scaled(), torch.randn(2, 3), 2.5, shapes={"x": None, "scale": Dim.DYNAMIC})


@pytest.mark.parametrize(
    ("axes", "expected"),
    [
        pytest.param({0: Dim.STATIC, 1: Dim.DYNAMIC}, [2, "sym"], id="static_and_dynamic"),
        pytest.param({0: Dim.AUTO, 1: Dim.AUTO}, ["sym", "sym"], id="auto"),
        pytest.param((Dim.DYNAMIC, Dim.STATIC), ["sym", 3], id="tuple"),
        pytest.param((None, Dim.AUTO), [2, "sym"], id="tuple_with_none"),
        pytest.param(None, [2, 3], id="none"),
    ],
)
def test_hints_on_tensor_axes(axes: Any, expected: list[Any]) -> None:
    model = Scaled()
    program = _export(model, torch.randn(2, 3), 5, shapes={"x": axes, "scale": None})
    assert _dims(program) == expected
    batch = 2 if expected[0] == 2 else 4
    width = 3 if expected[1] == 3 else 7
    assert_onnx_program_close(program, model, torch.randn(batch, width), 5)


class Nested(nn.Module):
    def forward(self, items: list[torch.Tensor], named: dict[str, Any]) -> torch.Tensor:
        return items[0] + items[1] * named["w"] + named["k"]


def test_none_and_hints_on_list_and_dict_leaves() -> None:
    model = Nested()
    args = ([torch.randn(2, 3), torch.randn(2, 3)], {"w": torch.randn(3), "k": 1.5})
    shapes = {
        "items": [{0: Dim.AUTO}, (Dim.DYNAMIC, Dim.STATIC)],
        "named": {"w": None, "k": Dim.STATIC},
    }
    program = _export(model, *args, shapes=shapes)
    assert _dims(program, 0) == ["sym", 3] and _dims(program, 2) == [3]
    other = ([torch.randn(5, 3), torch.randn(5, 3)], {"w": torch.randn(3), "k": 1.5})
    assert_onnx_program_close(program, model, *other)


def test_named_dims_with_bounds_run_inside_them() -> None:
    model = Scaled()
    batch = Dim("batch", min=2, max=16)
    program = _export(model, torch.randn(4, 3), 2, shapes={"x": {0: batch}, "scale": None})
    assert [str(d) for d in program.model.graph.inputs[0].shape or ()] == ["batch", "3"]
    for size in (2, 9, 16):
        assert_onnx_program_close(program, model, torch.randn(size, 3), 2)


class EveryOther(nn.Module):
    def forward(self, x: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
        return x[::2] + half


def test_derived_dims() -> None:
    model = EveryOther()
    n = Dim("n", min=1, max=64)
    program = _export(
        model, torch.randn(8, 3), torch.randn(4, 3), shapes={"x": {0: 2 * n}, "half": {0: n}}
    )
    assert str((program.model.graph.inputs[1].shape or ())[0]) == "n"
    for size in (1, 5, 11):
        assert_onnx_program_close(program, model, torch.randn(2 * size, 3), torch.randn(size, 3))
