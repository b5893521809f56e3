"""A file never claims an axis it cannot serve, and keeps the ranges the program holds for.

Each model is exported at one example, saved, loaded, and checked against eager PyTorch
at sizes the example did not have: examples of size 1, sizes that coincide with another
size of the model, a transformer encoder with and without a padding mask, recurrent
layers over a time axis, views across axes. A range the model's code sets (``if
x.shape[0] > 2:``) or the user's ``Dim`` bounds travel with the file: a call outside is a
typed ``InputShapeError``, never a wrong answer, and a guard's range is a warning at the
model's line when exporting.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.adapters import InputShapeError
from onnx_export.errors import ShapeRangeWarning
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _export(model: nn.Module, example: tuple[Any, ...], shapes: Any) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    return onnx_export.dynamo_export(model, *example, export_options=options)


def _loaded(program: onnx_export.ONNXProgram, tmp_path: Path) -> Any:
    return onnx_export.load(program.save(tmp_path / "m.onnx"))


def _encoder(layers: int = 2) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def test_an_encoder_exported_at_batch_1_and_sequence_1_runs_at_other_sizes(
    tmp_path: Path,
) -> None:
    model = _encoder()
    program = _export(model, (torch.randn(1, 1, 16),), {"src": {0: "batch", 1: "seq"}})
    assert [str(v.shape) for v in program.model.graph.inputs] == ["[batch,seq,16]"]
    loaded = _loaded(program, tmp_path)
    for shape in [(3, 5, 16), (2, 9, 16), (1, 1, 16)]:
        assert_onnx_program_close(loaded, model, torch.randn(*shape), atol=1e-4)
    rules = [d.rule.id for d in program.diagnostic_context.diagnostics]
    assert "OXE0020" in rules  # captured again at other example sizes, said so


class _Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = _encoder(layers=1)

    def forward(self, src: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(src, src_key_padding_mask=mask)


def _padding(batch: int, seq: int) -> torch.Tensor:
    lengths = torch.arange(batch) % seq + 1
    return torch.arange(seq)[None, :] >= lengths[:, None]  # True: padded


def test_an_encoder_with_a_padding_mask_is_right_at_other_sizes(tmp_path: Path) -> None:
    model = _Masked()
    shapes = {"src": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    program = _export(model, (torch.randn(2, 3, 16), _padding(2, 3)), shapes)
    loaded = _loaded(program, tmp_path)
    for batch, seq in [(4, 6), (3, 2)]:
        src, mask = torch.randn(batch, seq, 16), _padding(batch, seq)
        with torch.enable_grad():  # the path torch.export traced (no fast path)
            want = model(src, mask).detach()
        got = torch.as_tensor(loaded(src, mask))
        kept = ~mask  # padded positions are not compared: eager's fast path zeroes them
        torch.testing.assert_close(got[kept], want[kept], atol=1e-4, rtol=1e-4)


class _View(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(1), -1)


def test_a_batch_that_only_coincides_with_another_size_stays_dynamic(tmp_path: Path) -> None:
    # The example's batch equals size(1): torch.export at (10, 10, 3) ties the two.
    program = _export(_View(), (torch.randn(10, 10, 3),), {"x": {0: "batch"}})
    assert [str(v.shape) for v in program.model.graph.inputs] == ["[batch,10,3]"]
    loaded = _loaded(program, tmp_path)
    for batch in (7, 10, 1):
        assert_onnx_program_close(loaded, _View(), torch.randn(batch, 10, 3))


class _Across(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        y = self.linear(x.reshape(batch * seq, -1))
        return y.view(batch, seq, -1).transpose(0, 1).reshape(seq, -1)


@pytest.mark.parametrize("example", [(1, 1, 8), (4, 4, 8), (8, 8, 8)], ids=str)
def test_views_across_dynamic_axes(example: tuple[int, ...], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Across()
    program = _export(model, (torch.randn(*example),), {"x": {0: "batch", 1: "seq"}})
    loaded = _loaded(program, tmp_path)
    for shape in [(3, 5, 8), (1, 7, 8), (6, 1, 8)]:
        assert_onnx_program_close(loaded, model, torch.randn(*shape))


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
@pytest.mark.parametrize("example", [(1, 1, 8), (2, 5, 8)], ids=str)
def test_recurrent_layers_keep_the_time_axis(
    kind: type[nn.Module], example: tuple[int, ...], tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = kind(8, 12, batch_first=True).eval()
    program = _export(model, (torch.randn(*example),), {"input": {0: "batch", 1: "time"}})
    loaded = _loaded(program, tmp_path)
    for shape in [(3, 7, 8), (1, 2, 8)]:
        assert_onnx_program_close(loaded, model, torch.randn(*shape), atol=1e-4)


class _Guarded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            return x * 2
        return x + 1


_GUARD_LINE = inspect.getsourcelines(_Guarded.forward)[1] + 1


def test_a_range_from_a_guard_is_warned_at_its_line_and_enforced(tmp_path: Path) -> None:
    with pytest.warns(ShapeRangeWarning, match=r"x\[0\] .* \[3, inf\)") as got:
        program = _export(_Guarded(), (torch.randn(4, 3),), {"x": {0: "batch"}})
    (warning,) = [w for w in got if issubclass(w.category, ShapeRangeWarning)]
    assert (warning.filename, warning.lineno) == (__file__, _GUARD_LINE)
    loaded = _loaded(program, tmp_path)
    assert_onnx_program_close(loaded, _Guarded(), torch.randn(6, 3))
    for call in (program, loaded):
        with pytest.raises(InputShapeError) as caught:
            call(torch.randn(1, 3))  # the other branch: refused, not a wrong answer
        message = str(caught.value)
        assert "x" in message and "axis 0" in message and "[3, inf)" in message
        assert f"test_served_axes.py:{_GUARD_LINE}" in message and "if x.shape[0] > 2" in message


def test_the_users_dim_bounds_are_enforced_at_call_time(tmp_path: Path) -> None:
    batch = Dim("b", min=3, max=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShapeRangeWarning)  # the user's own bounds: no warning
        program = _export(_Guarded(), (torch.randn(4, 3),), {"x": {0: batch}})
    loaded = _loaded(program, tmp_path)
    assert_onnx_program_close(loaded, _Guarded(), torch.randn(8, 3))
    for size in (1, 20):
        with pytest.raises(InputShapeError, match=r"in \[3, 8\].*Dim\('b', min=3, max=8\)"):
            loaded(torch.randn(size, 3))
    ranges = program.adapter_spec.inputs[0].tensor.axis_ranges
    assert [(r.axis, r.low, r.high) for r in ranges] == [(0, 3, 8)]


def test_an_unbounded_axis_keeps_taking_a_batch_of_1(tmp_path: Path) -> None:
    model = nn.Linear(4, 2)
    program = _export(model, (torch.randn(5, 4),), {"input": {0: "batch"}})
    assert program.adapter_spec.inputs[0].tensor.axis_ranges == ()
    assert_onnx_program_close(_loaded(program, tmp_path), model, torch.randn(1, 4))


def test_info_shows_the_ranges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_export.cli import main

    program = _export(_Guarded(), (torch.randn(4, 3),), {"x": {0: Dim("b", min=3, max=8)}})
    path = program.save(tmp_path / "m.onnx")
    assert main(["info", str(path)]) == 0
    (line,) = [t for t in capsys.readouterr().out.splitlines() if "ranges (" in t]
    assert "x[0] (b) in [3, 8] (set by Dim('b', min=3, max=8) in dynamic_shapes)" in line


def test_allow_static_fallback_keeps_a_coinciding_batch_dynamic(tmp_path: Path) -> None:
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch"}}, allow_static_fallback=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", onnx_export.errors.StaticDimensionWarning)
        program = onnx_export.dynamo_export(_View(), torch.randn(10, 10, 3), export_options=options)
    assert [str(v.shape) for v in program.model.graph.inputs] == ["[batch,10,3]"]
    assert_onnx_program_close(_loaded(program, tmp_path), _View(), torch.randn(7, 10, 3))


class EvenUNet(nn.Module):
    """Down by a strided conv, up by a transposed conv, joined at the input's height."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.out = nn.Conv2d(7, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cat([x, self.up(torch.relu(self.down(x)))], 1))


def test_derived_dims_keep_their_formula_at_other_sizes_and_at_call_time(tmp_path: Path) -> None:
    # ``2 * Dim("h")``: the check at a second size takes even heights (odd ones broke
    # ORT's buffer reuse, and refused the export), and the file refuses odd ones and
    # heights below the bound with an InputShapeError instead of ORT's failure.
    model = EvenUNet().eval()
    shapes = ({0: Dim("batch"), 2: 2 * Dim("h", min=4), 3: 2 * Dim("w", min=2)},)
    program = _export(model, (torch.randn(2, 3, 16, 12),), shapes)
    loaded = _loaded(program, tmp_path)
    for shape in [(1, 3, 10, 6), (3, 3, 22, 30)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(torch.from_numpy(loaded(x.numpy())), model(x).detach())
    with pytest.raises(InputShapeError, match=r"'2\*h' \(axis 2\) to be 2\*h for a whole h"):
        loaded(torch.randn(1, 3, 11, 6).numpy())
    with pytest.raises(InputShapeError, match=r"'2\*h' \(axis 2\) in \[8, inf\)"):
        loaded(torch.randn(1, 3, 6, 6).numpy())


def test_axes_tied_to_one_root_agree_on_it(tmp_path: Path) -> None:
    class Halves(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.reshape(x.shape[0] // 2, 2).sum(1) + y

    n = Dim("n", min=2)
    program = _export(Halves(), (torch.randn(8), torch.randn(4)), ({0: 2 * n}, {0: n}))
    loaded = _loaded(program, tmp_path)
    x, y = torch.randn(14), torch.randn(7)
    torch.testing.assert_close(torch.from_numpy(loaded(x.numpy(), y.numpy())), Halves()(x, y))
    with pytest.raises(InputShapeError, match="must agree on its size"):
        loaded(torch.randn(14).numpy(), torch.randn(6).numpy())
