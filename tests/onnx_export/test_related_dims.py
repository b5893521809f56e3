"""Dynamic dims the model relates (tokens + cache = context), given as independent dims.

``torch.cat([tokens, cache], 1)`` feeding ``nn.Linear(32, ...)`` holds only when the two
lengths sum to 32. torch.export finds ``c = 32 - t`` and suggests it; the export applies
it, says so (a ``DimensionRelationWarning`` and an OXE0020 SARIF entry), records it in the
adapter spec, and the exported model refuses sizes that break it with an
``InputShapeError`` naming the relation. Each export runs in ONNX Runtime against eager
at the example and at other sizes that keep the relation, before and after saving.
"""

from __future__ import annotations

import dataclasses
import pathlib
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.adapters import AdapterSpec, DimRelation, InputShapeError, LeafSpec, TensorSpec
from onnx_export.adapters._tensor_checks import CheckTensors
from onnx_export.capture._call import AxisTie, forward_signature, prepare_call
from onnx_export.capture._resize import resized_call
from onnx_export.cli import main
from onnx_export.errors import DimensionRelationWarning
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class Context(nn.Module):
    """New tokens and a cache whose lengths always sum to the context of 32."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 8)

    def forward(self, tokens: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat([tokens, cache], 1))


class Twice(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x], 1) * y


def _export(model: nn.Module, *args: Any, shapes: Any) -> tuple[Any, list[str]]:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnx_export.dynamo_export(model, *args, export_options=options)
    related = [str(w.message) for w in caught if w.category is DimensionRelationWarning]
    return program, related


def _oxe0020(program: Any) -> list[str]:
    return [d.message for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0020"]


SHAPES = [
    pytest.param({"tokens": {0: "b", 1: Dim("t")}, "cache": {0: "b", 1: Dim("c")}}, id="dims"),
    pytest.param({"tokens": {0: "b", 1: "t"}, "cache": {0: "b", 1: "c"}}, id="names"),
    pytest.param(
        {"tokens": {0: "b", 1: Dim("t", min=2, max=30)}, "cache": {0: "b", 1: Dim("c")}},
        id="bounded",
    ),
]


@pytest.mark.parametrize("shapes", SHAPES)
def test_sum_to_a_constant_is_applied_warned_recorded_and_enforced(
    shapes: Any, tmp_path: pathlib.Path
) -> None:
    model = Context()
    program, related = _export(model, torch.randn(2, 12), torch.randn(2, 20), shapes=shapes)
    assert len(related) == 1 and "c = 32 - t" in related[0], related
    assert "cache[1]" in related[0] and "tokens[1]" in related[0]
    assert any("c = 32 - t" in m for m in _oxe0020(program)), _oxe0020(program)
    assert [str(v.shape) for v in program.model.graph.inputs] == ["[b,t]", "[b,c]"]
    spec = program.adapter_spec
    assert spec is not None and [(r.dim, r.terms, r.constant) for r in spec.relations] == [
        ("c", (("t", -1),), 32)
    ]
    for batch, t in ((2, 12), (3, 5), (1, 29), (4, 2)):
        assert_onnx_program_close(program, model, torch.randn(batch, t), torch.randn(batch, 32 - t))
    with pytest.raises(InputShapeError, match=r"'c' \(axis 1\) to be 32 - t = 27 for t = 5"):
        program(torch.randn(2, 5), torch.randn(2, 20))
    program.save(tmp_path / "context.onnx")
    loaded = onnx_export.load(tmp_path / "context.onnx")
    assert loaded.spec is not None and loaded.spec.relations == spec.relations
    tokens, cache = np.ones((3, 7), np.float32), np.ones((3, 25), np.float32)
    expected = model(torch.from_numpy(tokens), torch.from_numpy(cache)).detach().numpy()
    np.testing.assert_allclose(loaded(tokens, cache), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(InputShapeError, match="c = 32 - t"):
        loaded(tokens, np.ones((3, 24), np.float32))


def test_cli_info_lists_and_run_enforces_the_relation(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = Context()
    shapes = {"tokens": {1: "t"}, "cache": {1: "c"}}
    program, _ = _export(model, torch.randn(2, 12), torch.randn(2, 20), shapes=shapes)
    program.save(tmp_path / "context.onnx")
    assert main(["info", str(tmp_path / "context.onnx")]) == 0
    assert "related dimensions (calls that break them are refused): c = 32 - t" in (
        capsys.readouterr().out
    )
    tokens, cache = np.ones((2, 9), np.float32), np.ones((2, 23), np.float32)
    np.savez(tmp_path / "ok.npz", tokens=tokens, cache=cache)
    out = tmp_path / "out.npz"
    assert main(["run", str(tmp_path / "context.onnx"), "--inputs", str(tmp_path / "ok.npz"),
                 "--output", str(out)]) == 0  # fmt: skip
    expected = model(torch.from_numpy(tokens), torch.from_numpy(cache)).detach().numpy()
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["output"], expected, rtol=1e-5, atol=1e-5)
    np.savez(tmp_path / "bad.npz", tokens=tokens, cache=np.ones((2, 20), np.float32))
    assert main(["run", str(tmp_path / "context.onnx"), "--inputs", str(tmp_path / "bad.npz")]) == 1
    assert "c = 32 - t" in capsys.readouterr().err


def test_an_unnamed_dependent_dim_is_named_by_its_formula_and_still_enforced() -> None:
    model = Context()
    shapes = {"tokens": {1: Dim("t")}, "cache": {1: Dim.DYNAMIC}}
    program, related = _export(model, torch.randn(2, 12), torch.randn(2, 20), shapes=shapes)
    assert [str(v.shape) for v in program.model.graph.inputs] == ["[2,t]", "[2,32 - t]"]
    assert len(related) == 1 and "cache[1] = 32 - t" in related[0], related
    assert_onnx_program_close(program, model, torch.randn(2, 9), torch.randn(2, 23))
    with pytest.raises(InputShapeError, match="32 - t"):
        program(torch.randn(2, 9), torch.randn(2, 22))


def test_an_increasing_relation_torch_writes_as_a_derived_dim() -> None:
    model = Twice()
    shapes = {"x": {1: Dim("t")}, "y": {1: Dim("c")}}
    program, related = _export(model, torch.randn(2, 5), torch.randn(2, 10), shapes=shapes)
    assert len(related) == 1 and "c = 2*t" in related[0], related
    for t in (1, 7):
        assert_onnx_program_close(program, model, torch.randn(2, t), torch.randn(2, 2 * t))
    with pytest.raises(InputShapeError, match="c = 2\\*t"):
        program(torch.randn(2, 7), torch.randn(2, 15))


def test_a_relation_the_user_spelled_is_not_warned_about() -> None:
    model = Twice()
    t = Dim("t")
    shapes = {"x": {1: t}, "y": {1: 2 * t}}
    program, related = _export(model, torch.randn(2, 5), torch.randn(2, 10), shapes=shapes)
    assert related == []
    assert program.adapter_spec is not None and program.adapter_spec.relations == ()
    with pytest.raises(InputShapeError):
        program(torch.randn(2, 7), torch.randn(2, 15))


def test_second_sizes_keep_the_relation() -> None:
    model = Context()
    shapes = {"tokens": {1: "t"}, "cache": {1: "c"}}
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    args = (torch.randn(2, 12), torch.randn(2, 20))
    call = prepare_call(model, forward_signature(model), args, {}, options)
    tie = AxisTie(("cache", 1), ((("tokens", 1), -1),), 32)
    resized = resized_call(dataclasses.replace(call, ties=(tie,)))
    assert resized is not None
    sizes = {(p, a): new for p, a, _, new in resized.sizes}
    assert sizes[("tokens", 1)] + sizes[("cache", 1)] == 32
    tokens, cache = resized.call.args
    assert tokens.shape[1] + cache.shape[1] == 32


def _check(relations: tuple[DimRelation, ...]) -> CheckTensors:
    leaves = [
        LeafSpec("tokens", "tensor", TensorSpec("tokens", "float32", ("b", "t"))),
        LeafSpec("cache", "tensor", TensorSpec("cache", "float32", ("b", "c"))),
    ]
    return CheckTensors(leaves, relations)


def test_relation_check_and_json() -> None:
    relation = DimRelation("c", (("t", -1),), 32, "found by torch.export")
    check = _check((relation,))
    check([np.zeros((2, 5), np.float32), np.zeros((2, 27), np.float32)])
    with pytest.raises(InputShapeError) as caught:
        check([np.zeros((2, 5), np.float32), np.zeros((2, 20), np.float32)])
    text = str(caught.value)
    assert "cache: expected dimension 'c' (axis 1) to be 32 - t = 27 for t = 5" in text
    assert "e.g. c = 27" in text
    program, _ = _export(
        Context(), torch.randn(2, 12), torch.randn(2, 20), shapes=SHAPES[1].values[0]
    )
    spec = program.adapter_spec
    assert spec is not None
    assert AdapterSpec.from_json(spec.to_json()) == spec
    assert '"relations":[{"dim":"c","terms":[["t",-1]],"constant":32' in spec.to_json()


@pytest.mark.parametrize(
    ("relation", "text"),
    [
        (DimRelation("c", (("t", -1),), 32), "c = 32 - t"),
        (DimRelation("c", (("t", 2),), 1), "c = 2*t + 1"),
        (DimRelation("c", (("a", 1), ("b", 1))), "c = a + b"),
        (DimRelation("c", (("a", 1), ("b", -3)), -4), "c = a - 3*b - 4"),
    ],
)
def test_relation_text(relation: DimRelation, text: str) -> None:
    assert relation.text() == text
