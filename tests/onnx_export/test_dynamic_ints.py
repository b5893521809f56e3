"""A Python ``int`` input marked dynamic becomes a 0-d INT64 graph input.

torch.export takes ``Dim.DYNAMIC`` on an int and makes it a SymInt; the ONNX model takes
it as an input and the adapter passes the caller's int. Names and bounded ``Dim``s (which
torch.export refuses on an int) are accepted too: a name names the dims equal to the int,
bounds are checked against the range the model's code holds for. ``Dim.AUTO`` is torch's
(dynamic unless the code fixes the value). Each call's int is checked against that range.
Each export runs in ONNX Runtime against eager at other values of the int and other sizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.adapters import (
    AdapterSpec,
    AdapterSpecError,
    ConstantMismatchError,
    InputShapeError,
    InputStructureError,
    build_adapter_spec,
)
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class UsesCount(nn.Module):
    """``n`` in arithmetic, a range, a repeat count and a view size."""

    def forward(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
        ramp = torch.arange(n) + x.shape[0]
        return x * n, ramp, x.repeat(n, 1), x.repeat(n, 1).view(n, -1)


class Slices(nn.Module):
    """``x[:, :n]``: torch.export finds n at most ``x.shape[1]``."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:, :n] * 2


def _export(model: nn.Module, *args: Any, shapes: Any) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    return onnx_export.dynamo_export(model, *args, export_options=options)


def _int_input(program: onnx_export.ONNXProgram, name: str) -> ir.Value:
    value = next(v for v in program.model.graph.inputs if v.name == name)
    assert value.dtype == ir.DataType.INT64
    assert value.shape is not None and list(value.shape) == []
    return value


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(Dim.DYNAMIC, id="dynamic"),
        pytest.param("n", id="name"),
        pytest.param(Dim("n", min=2, max=64), id="bounded_dim"),
    ],
)
def test_int_marked_dynamic_is_a_graph_input(spec: Any) -> None:
    model = UsesCount()
    program = _export(model, torch.randn(3, 4), 5, shapes={"x": {0: Dim.DYNAMIC}, "n": spec})
    _int_input(program, "n")
    for rows, n in ((3, 5), (2, 7), (6, 2), (1, 3)):
        assert_onnx_program_close(program, model, torch.randn(rows, 4), n)


def test_named_int_names_the_dims_equal_to_it() -> None:
    program = _export(UsesCount(), torch.randn(3, 4), 5, shapes={"x": {0: "rows"}, "n": "n"})
    ramp = program.model.graph.outputs[1]
    assert ramp.shape is not None and [str(d) for d in ramp.shape] == ["n"]
    assert_onnx_program_close(program, UsesCount(), torch.randn(2, 4), 9)


def test_slice_by_int_within_the_range_torch_found() -> None:
    model = Slices()
    program = _export(model, torch.randn(3, 8), 5, shapes={"x": {0: "rows"}, "n": Dim.DYNAMIC})
    for n in (2, 5, 8):
        assert_onnx_program_close(program, model, torch.randn(4, 8), n)


def test_saved_and_loaded_model_takes_a_plain_int(tmp_path: Path) -> None:
    model = UsesCount()
    program = _export(model, torch.randn(3, 4), 5, shapes={"x": {0: "rows"}, "n": "n"})
    path = tmp_path / "model.onnx"
    program.save(path)
    loaded = onnx_export.load(path)
    assert_onnx_program_close(loaded, model, torch.randn(2, 4), 6)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(2.5, id="float"),
        pytest.param(True, id="bool"),
        pytest.param(torch.tensor(3), id="tensor"),
    ],
)
def test_wrong_type_at_call_time_says_an_int_is_expected(value: Any) -> None:
    program = _export(UsesCount(), torch.randn(3, 4), 5, shapes={"x": None, "n": Dim.DYNAMIC})
    with pytest.raises(InputStructureError, match="n: expected a Python int"):
        program(torch.randn(3, 4), value)


@pytest.mark.parametrize(
    ("model", "dim", "match"),
    [
        pytest.param(Slices(), Dim("n", max=64), r"n in \[0, 8\]", id="slice_bound"),
        pytest.param(UsesCount(), Dim("n", min=1, max=64), r"n in \[2, ", id="size_from_two"),
    ],
)
def test_bounds_the_model_narrows_are_refused_with_the_range_it_holds_for(
    model: nn.Module, dim: Any, match: str
) -> None:
    x = torch.randn(3, 8)
    with pytest.raises(onnx_export.ExportInputError, match=f"only holds for {match}"):
        _export(model, x, 5, shapes={"x": None, "n": dim})


@pytest.mark.parametrize(
    ("model", "n", "match"),
    [
        pytest.param(Slices(), 9, r"\[0, 8\]", id="above"),
        pytest.param(UsesCount(), 1, r"\[2, inf\]", id="below"),
    ],
)
def test_int_outside_the_range_the_program_holds_for_is_refused_at_call_time(
    model: nn.Module, n: int, match: str
) -> None:
    program = _export(model, torch.randn(3, 8), 5, shapes={"x": None, "n": Dim.DYNAMIC})
    with pytest.raises(InputShapeError, match=f"n: expected an int in {match}"):
        program(torch.randn(3, 8), n)


class FixedByCode(nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.reshape(n, -1) if n == 5 else x


def test_auto_int_is_dynamic_where_the_code_allows() -> None:
    model = UsesCount()
    program = _export(model, torch.randn(3, 4), 5, shapes={"x": None, "n": Dim.AUTO})
    _int_input(program, "n")
    assert_onnx_program_close(program, model, torch.randn(3, 4), 3)


def test_auto_int_the_code_fixes_is_a_constant() -> None:
    model = FixedByCode()
    program = _export(model, torch.randn(10, 8), 5, shapes={"x": None, "n": Dim.AUTO})
    assert [v.name for v in program.model.graph.inputs] == ["x"]
    assert_onnx_program_close(program, model, torch.randn(10, 8), 5)
    with pytest.raises(ConstantMismatchError, match="n: expected the constant 5"):
        program(torch.randn(10, 8), 4)


@pytest.mark.parametrize(
    ("value", "spec", "match"),
    [
        pytest.param(2.5, Dim.DYNAMIC, "only a Python int can be a dynamic scalar", id="float"),
        pytest.param(True, Dim.DYNAMIC, "only a Python int can be a dynamic scalar", id="bool"),
        pytest.param(5, 2 * Dim("n"), "relates ints to no other dim", id="derived_dim"),
    ],
)
def test_dynamic_scalars_torch_cannot_make_are_refused(value: Any, spec: Any, match: str) -> None:
    with pytest.raises(onnx_export.ExportInputError, match=match):
        _export(UsesCount(), torch.randn(3, 4), value, shapes={"x": None, "n": spec})


def test_spec_json_round_trips_and_older_specs_still_load() -> None:
    program = _export(UsesCount(), torch.randn(3, 4), 5, shapes={"x": None, "n": Dim.DYNAMIC})
    spec = program.adapter_spec
    assert spec is not None
    text = spec.to_json()
    assert AdapterSpec.from_json(text) == spec
    older = json.loads(text)  # a spec written before python_int existed: no such key
    for leaf in older["inputs"]:
        leaf.get("tensor", {}).pop("python_int", None)
        leaf.get("tensor", {}).pop("int_range", None)
    loaded = AdapterSpec.from_json(json.dumps(older))
    assert [leaf.tensor.python_int for leaf in loaded.inputs if leaf.tensor] == [False, False]
    assert [leaf.tensor.python_int for leaf in spec.inputs if leaf.tensor] == [False, True]
    assert [leaf.tensor.int_range for leaf in spec.inputs if leaf.tensor] == [None, (2, None)]


class Nested(nn.Module):
    def forward(self, x: torch.Tensor, cfg: list[Any], y: torch.Tensor) -> torch.Tensor:
        return x[: cfg[1]] * cfg[1] + cfg[0].sum() + y[: cfg[1]]


def test_int_nested_in_a_list_and_keywords_out_of_order() -> None:
    model, x, y = Nested(), torch.randn(6, 2), torch.randn(6, 2)
    shapes = {"x": {0: "rows"}, "y": {0: "rows"}, "cfg.1": Dim.DYNAMIC}
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    program = onnx_export.dynamo_export(
        model, x, y=y, cfg=[torch.randn(2), 4], export_options=options
    )
    _int_input(program, "cfg.1")
    assert_onnx_program_close(
        program, model, torch.randn(5, 2), [torch.randn(2), 3], torch.randn(5, 2)
    )


def test_exported_program_with_a_symint_input() -> None:
    model, x = UsesCount(), torch.randn(3, 4)
    shapes = ({0: Dim.DYNAMIC}, Dim.DYNAMIC)
    program = onnx_export.dynamo_export(
        torch.export.export(model, (x, 5), dynamic_shapes=shapes), x, 5
    )
    _int_input(program, "n")
    assert_onnx_program_close(program, model, torch.randn(2, 4), 3)


def test_example_of_one_is_not_specialised() -> None:
    model = UsesCount()
    program = _export(model, torch.randn(3, 4), 1, shapes={"x": None, "n": Dim.DYNAMIC})
    _int_input(program, "n")
    for n in (1, 4):
        assert_onnx_program_close(program, model, torch.randn(3, 4), n)


@pytest.mark.parametrize(
    ("tensor", "match"),
    [
        pytest.param({"dtype": "float32", "python_int": True}, "dtype int64 and shape", id="dtype"),
        pytest.param({"python_int": 1}, "expected true or false", id="not_bool"),
        pytest.param({"int_range": [2, None]}, "on a Python int input", id="range_on_tensor"),
        pytest.param({"python_int": True, "int_range": [5, 2]}, "low <= high", id="empty_range"),
        pytest.param({"python_int": True, "int_range": [2]}, r"\[low, high\]", id="one_bound"),
    ],
)
def test_malformed_int_input_specs_are_refused(tensor: dict[str, Any], match: str) -> None:
    valid = build_adapter_spec(None, (5,), {}, np.zeros(1), int_inputs={"args.0": "n"})
    obj = json.loads(valid.to_json())
    assert obj["inputs"][0]["tensor"] == {
        "name": "n",
        "dtype": "int64",
        "shape": [],
        "python_int": True,
    }
    del obj["inputs"][0]["tensor"]["python_int"]
    obj["inputs"][0]["tensor"].update(tensor)
    with pytest.raises(AdapterSpecError, match=match):
        AdapterSpec.from_json(json.dumps(obj))
