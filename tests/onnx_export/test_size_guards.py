"""Every guard the captured program holds on a dynamic size is kept by the file.

torch.export traces dynamic sizes as 2 or more and keeps only the branch the example
takes; the file must refuse (``InputShapeError``, naming the model's line) the sizes the
other branch would have served, and the export must say so (a ``ShapeRangeWarning`` at
that line, an OXE0020 entry): a comparison with 1, an excluded size, a divisibility, and
a lower bound that torch's own code (a pooling kernel) put on the user's dynamic axis.
"""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.adapters import AdapterSpec, AxisRange, InputShapeError
from onnx_export.errors import ShapeRangeWarning
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _export(model: nn.Module, example: tuple[Any, ...], shapes: Any) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    return onnx_export.dynamo_export(model, *example, export_options=options)


def _line(method: Any, offset: int) -> int:
    return inspect.getsourcelines(method)[1] + offset


class _SizeOne(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:
            return x * 100
        return x * 2


class _Excluded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 4:
            return x * 100
        return x * 2


class _Multiple(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] % 4 == 0:
            return x * 3
        return x * 2


class _Pooled(nn.Module):
    """An anchor-free head's pooling: torch's own code needs H, W >= 5."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.max_pool2d(x, 5)


CASES = [
    pytest.param(
        _SizeOne(), torch.randn(3, 4), {"x": {0: Dim.DYNAMIC}}, 1, 0, "compares it with 1",
        _line(_SizeOne.forward, 1), "if x.shape[0] == 1", (torch.randn(5, 4),), id="size-one",
    ),
    pytest.param(
        _Excluded(), torch.randn(3, 4), {"x": {0: Dim.DYNAMIC}}, 4, 0, r"any size but 4",
        _line(_Excluded.forward, 1), "if x.shape[0] == 4", (torch.randn(1, 4),), id="excluded",
    ),
    pytest.param(
        _Multiple(), torch.randn(3, 8), {"x": {1: Dim.DYNAMIC}}, 6, 1, "multiples of 4",
        _line(_Multiple.forward, 1), "if x.shape[1] % 4 == 0", (torch.randn(3, 12),),
        id="multiple",
    ),
    pytest.param(
        _Pooled(), torch.randn(1, 2, 12, 12), {"x": {2: Dim.DYNAMIC, 3: Dim.DYNAMIC}}, 4, 2,
        r"narrows it to \[5, inf\)", _line(_Pooled.forward, 1), "max_pool2d(x, 5)",
        (torch.randn(1, 2, 5, 7),), id="narrowed-by-torch",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "example", "shapes", "refused", "axis", "said", "line", "code", "other"), CASES
)
def test_a_guard_is_warned_at_its_line_and_refused_at_call_time(
    tmp_path: Path,
    model: nn.Module,
    example: torch.Tensor,
    shapes: Any,
    refused: int,
    axis: int,
    said: str,
    line: int,
    code: str,
    other: tuple[torch.Tensor, ...],
) -> None:
    with pytest.warns(ShapeRangeWarning, match=said) as got:
        program = _export(model, (example,), shapes)
    found = [w for w in got if issubclass(w.category, ShapeRangeWarning)]
    assert (found[0].filename, found[0].lineno) == (__file__, line)
    loaded = onnx_export.load(program.save(tmp_path / "m.onnx"))
    assert_onnx_program_close(loaded, model, example)
    assert_onnx_program_close(loaded, model, *other)  # another size the file serves
    bad = list(example.shape)
    bad[axis] = refused
    if isinstance(model, _Pooled):
        bad[3] = refused
    for call in (program, loaded):
        with pytest.raises(InputShapeError) as caught:
            call(torch.randn(bad))  # eager takes another path (or refuses): never silent
        assert f"test_size_guards.py:{line}" in str(caught.value) and code in str(caught.value)


def test_the_report_names_the_line_of_a_size_one_branch(tmp_path: Path) -> None:
    with pytest.warns(ShapeRangeWarning):
        program = _export(_SizeOne(), (torch.randn(3, 4),), {"x": {0: Dim.DYNAMIC}})
    sarif = json.loads(program.save_diagnostics(tmp_path / "r.sarif").read_text())
    results = [r for run in sarif["runs"] for r in run["results"] if r["ruleId"] == "OXE0020"]
    (found,) = [r for r in results if "size-1 branch" in r["message"]["text"]]
    region = found["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == _line(_SizeOne.forward, 1)


def test_a_size_one_branch_exported_at_size_one_is_not_refused() -> None:
    """Exported static at size 1 the other way round: nothing was assumed away."""
    model = _SizeOne()
    program = onnx_export.dynamo_export(model, torch.randn(1, 4))
    assert_onnx_program_close(program, model, torch.randn(1, 4))


def test_torch_internal_size_checks_are_not_the_models_guards() -> None:
    """``contiguous()`` compares sizes with 1 in torch's C++ code: no guard, batch 1 runs."""
    model = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
        1,
        enable_nested_tensor=False,
    ).eval()
    program = _export(model, (torch.randn(3, 5, 16),), {"src": {0: "batch", 1: "seq"}})
    assert program.adapter_spec.inputs[0].tensor.axis_ranges == ()
    assert_onnx_program_close(program, model, torch.randn(1, 5, 16))
    assert_onnx_program_close(program, model, torch.randn(3, 5, 16))


def test_excluded_sizes_and_multiples_round_trip_through_json() -> None:
    with pytest.warns(ShapeRangeWarning):
        program = _export(_Multiple(), (torch.randn(3, 8),), {"x": {0: "b", 1: "n"}})
    spec = program.adapter_spec
    assert AdapterSpec.from_json(spec.to_json()) == spec
    (ranges,) = [leaf.tensor.axis_ranges for leaf in spec.inputs]
    assert [(r.axis, r.multiple_of) for r in ranges] == [(1, 4)]
    both = AxisRange(0, 2, None, "", excluded=(3,), multiple_of=3)
    assert [both.holds(n) for n in (1, 3, 6, 7)] == [False, False, True, False]
    assert both.text() == "[2, inf), multiples of 3, any size but 3"


class _SameEitherWay(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:  # a shortcut: both branches give the same numbers
            return x * 2
        return x + x


def test_a_size_one_branch_that_agrees_at_size_one_is_not_refused() -> None:
    """The edge probe runs size 1: where the file is right there, nothing is refused."""
    model = _SameEitherWay()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShapeRangeWarning)
        program = _export(model, (torch.randn(3, 4),), {"x": {0: Dim.DYNAMIC}})
    assert program.adapter_spec.inputs[0].tensor.axis_ranges == ()
    for rows in (1, 3):
        assert_onnx_program_close(program, model, torch.randn(rows, 4))
