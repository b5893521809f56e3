"""What the export's own checks cost (#39): each check kept, run no more than it needs.

- The served-axes check runs the model at a second size only; the example's runs are the
  parity check's (and run here again only when the second size disagrees).
- The parity check takes eager's outputs at a second size that repeats the example (a
  batch of 2 checked at 3) as its reference where ONNX Runtime matches their leading
  slice; a model that mixes rows, a file that is wrong, a size-1 example (traced
  size-obliviously: eager at 1 may branch), a second size smaller than the example or
  training mode runs eager at the example, as before.
- A size-1 example's second size is 2 (3 when an input has a static 2): the check pays
  for every row it adds.
- One ONNX Runtime session serves every check (and later calls); the served-axes check
  still refuses a file that fails at a second size.
- Garbage collection during the export walks the export's objects, not the older heap;
  the freeze is undone afterwards, and a process's own freeze is left alone.
"""

from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest
import torch
from onnxscript import opset18 as op
from torch import nn

import onnx_export
from onnx_export._options import ExportOptions
from onnx_export.adapters import InputShapeError, _runtime
from onnx_export.capture._call import forward_signature, prepare_call
from onnx_export.capture._resize import resized_call
from onnx_export.diagnostics import DiagnosticOptions, Level
from onnx_export.errors import ConversionError, ShapeRangeWarning
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")

NOTES = DiagnosticOptions(verbosity=Level.NOTE)


class _Counted(nn.Module):
    """Counts its eager runs on real tensors (torch.export's traces are not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.batches: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(x) is torch.Tensor:  # a real run: capture traces fake tensors
            self.batches.append(int(x.shape[0]))
        return self.lin(x).relu()


def test_a_batch_of_two_runs_eager_once_at_the_second_size() -> None:
    torch.manual_seed(0)
    model = _Counted().eval()
    x = torch.randn(2, 4)
    options = ExportOptions(dynamic_shapes={"x": {0: "batch"}}, diagnostic_options=NOTES)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    # Eager at 3 (the served-axes check): its first two rows are the example's, and the
    # parity check compares ONNX Runtime at the example with them (they agree: no run at
    # 2); then the edge probe at 1.
    assert model.batches == [3, 1]
    assert "OXE0012" in _rules(program)  # the parity check's verdict, recorded
    assert "verify" in program.stage_times
    assert_onnx_program_close(program, model, x)
    assert_onnx_program_close(program, model, torch.randn(5, 4))
    assert_onnx_program_close(program, model, torch.randn(1, 4))


def test_a_batch_of_one_still_runs_eager_at_the_example() -> None:
    # A size-1 example is traced size-obliviously: eager at 1 may take a branch of its own,
    # which only a run at 1 shows.
    torch.manual_seed(0)
    model = _Counted().eval()
    options = ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, torch.randn(1, 4), export_options=options)
    assert model.batches == [2, 1]
    assert_onnx_program_close(program, model, torch.randn(1, 4))
    assert_onnx_program_close(program, model, torch.randn(3, 4))


class _SizeOneBranch(_Counted):
    """A branch of its own at a batch of 1 (a single sample scaled differently)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y * 2 if x.shape[0] == 1 else y


def test_a_size_one_branch_is_checked_by_eager_at_the_example() -> None:
    # The branch taken at 1 is not the one taken at 2: the file must be right at 1, which
    # only a run at 1 shows (eager's outputs at 2 are not lent to a size-1 example).
    torch.manual_seed(0)
    model = _SizeOneBranch().eval()
    x = torch.randn(1, 4)
    options = ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    with warnings.catch_warnings(), pytest.warns(ShapeRangeWarning, match=r"\[1, 1\]"):
        warnings.simplefilter("error", onnx_export.errors.ParityWarning)
        program = onnx_export.dynamo_export(model, x, export_options=options)
    assert 1 in model.batches
    assert_onnx_program_close(program, model, x)
    assert_onnx_program_close(program, model, torch.randn(1, 4))


class _SizeOneBranchOverTime(nn.Module):
    """A batch of 1 scaled differently, with a time axis of its own (dynamic too)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if x.shape[0] == 1:
            y = y * 2
        return y.cumsum(1)


@pytest.mark.parametrize(
    ("model", "shape", "dims"),
    [
        (_SizeOneBranch, (1, 4), {0: "batch"}),
        (_SizeOneBranchOverTime, (1, 5, 4), {0: "batch", 1: "time"}),
    ],
    ids=["batch", "batch-and-time"],
)
def test_a_size_one_branch_file_holds_at_one_only_and_says_so(
    model: type[nn.Module], shape: tuple[int, ...], dims: dict[int, str], tmp_path: Any
) -> None:
    # Exported at a batch of 1, the file takes the model's own size-1 branch; torch gave
    # the batch the range [0, 2], and at 2 the file differs from eager (a capture at other
    # sizes is off at 1). The file holds at 1 only: a ShapeRangeWarning says why, and a
    # call at 2 is refused, by the program and by the saved file, never answered wrongly.
    torch.manual_seed(0)
    eager = model().eval()
    options = ExportOptions(dynamic_shapes={"x": dims})
    with pytest.warns(ShapeRangeWarning, match=r"x\[0\] is dynamic.*example's size") as caught:
        program = onnx_export.dynamo_export(eager, torch.randn(*shape), export_options=options)
    assert "torch.cond" in str(caught[0].message)
    loaded = onnx_export.load(program.save(tmp_path / "m.onnx"))
    for run in (program, loaded):
        assert_onnx_program_close(run, eager, torch.randn(*shape))
        with pytest.raises(InputShapeError, match=r"in \[1, 1\].*holds at the example's size"):
            run(torch.randn(2, *shape[1:]))
    if len(shape) == 3:  # the time axis is still dynamic
        assert_onnx_program_close(loaded, eager, torch.randn(1, 7, 4))
    assert "OXE0020" in _rules(program)


def _rules(program: Any) -> list[str]:
    return [d.rule.id for d in program.diagnostic_context.diagnostics]


class _RowMixing(_Counted):
    """Each row minus the batch's mean: rows depend on each other (a second size's rows differ)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y - y.mean(0, keepdim=True) + x.shape[0]


def test_a_model_that_mixes_rows_runs_eager_at_the_example_and_matches() -> None:
    torch.manual_seed(0)
    model = _RowMixing().eval()
    x = torch.randn(2, 4)
    options = ExportOptions(dynamic_shapes={"x": {0: "batch"}}, diagnostic_options=NOTES)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    # At 3 the first rows are not the example's outputs (the batch size is added): the
    # parity check runs eager at the example itself (then the edge probe at 1).
    assert model.batches == [3, 2, 1]
    assert "OXE0012" in _rules(program)
    assert_onnx_program_close(program, model, x)
    assert_onnx_program_close(program, model, torch.randn(3, 4))
    assert_onnx_program_close(program, model, torch.randn(1, 4))


def test_a_second_size_below_the_example_lends_nothing() -> None:
    torch.manual_seed(0)
    model = _Counted().eval()
    x = torch.randn(6, 4)  # checked at 3: the example is not a slice of it
    program = onnx_export.dynamo_export(
        model, x, export_options=ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    )
    assert model.batches[:2] == [3, 6]
    assert_onnx_program_close(program, model, x)
    assert_onnx_program_close(program, model, torch.randn(2, 4))
    assert_onnx_program_close(program, model, torch.randn(1, 4))


def test_training_mode_runs_eager_at_the_example_in_eval_mode() -> None:
    torch.manual_seed(0)
    model = _Counted().train()
    x = torch.randn(1, 4)
    program = onnx_export.dynamo_export(
        model, x, export_options=ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    )
    # The served check ran a copy in training mode (not counted here); the parity check's
    # reference is eval mode, so it ran the model itself at the example.
    assert model.batches == [1]
    assert model.training
    assert_onnx_program_close(program, model.eval(), torch.randn(3, 4))
    assert_onnx_program_close(program, model, torch.randn(1, 4))


def _relu_as_identity(x: Any) -> Any:
    return op.Identity(x)


def test_a_wrong_file_is_still_a_parity_warning() -> None:
    # Wrong everywhere: the second size's check sees a difference it cannot blame on the
    # axis (right at the example? no), and the parity check finds the culprit at 1.
    torch.manual_seed(0)
    registry = onnx_export.OnnxRegistry()
    registry.register_op(torch.ops.aten.relu.default, _relu_as_identity)
    model = _Counted().eval()
    options = ExportOptions(
        dynamic_shapes={"x": {0: "batch"}}, onnx_registry=registry, diagnostic_options=NOTES
    )
    with pytest.warns(onnx_export.errors.ParityWarning, match="_relu_as_identity"):
        program = onnx_export.dynamo_export(model, torch.randn(2, 4), export_options=options)
    assert "OXE0022" in _rules(program)
    assert 2 in model.batches  # eager ran at the example to find the culprit


def _call(model: nn.Module, *args: torch.Tensor, shapes: dict) -> object:
    options = ExportOptions(dynamic_shapes=shapes)
    return prepare_call(model, forward_signature(model), args, {}, options)


class _Two(nn.Module):
    def forward(self, x: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        return x.sum() + pairs.sum()


def test_a_size_one_example_is_checked_at_two_unless_two_is_a_static_size() -> None:
    call = _call(nn.Linear(4, 2), torch.ones(1, 4), shapes={"input": {0: "batch"}})
    second = resized_call(call, smallest=True)  # type: ignore[arg-type]
    assert second is not None and second.text() == "input[0]: 1 -> 2"
    assert resized_call(call).text() == "input[0]: 1 -> 3"  # type: ignore[arg-type, union-attr]
    taken = _call(_Two(), torch.ones(1, 4), torch.ones(2, 5), shapes={"x": {0: "b"}})
    assert resized_call(taken, smallest=True).text() == "x[0]: 1 -> 3"  # type: ignore[arg-type, union-attr]
    larger = _call(nn.Linear(4, 2), torch.ones(6, 4), shapes={"input": {0: "batch"}})
    assert resized_call(larger, smallest=True).text() == "input[0]: 6 -> 3"  # type: ignore[arg-type, union-attr]


def test_the_heap_is_unfrozen_after_the_export() -> None:
    assert gc.get_freeze_count() == 0
    program = onnx_export.dynamo_export(nn.ReLU(), torch.randn(2, 3))
    assert gc.get_freeze_count() == 0
    assert_onnx_program_close(program, nn.ReLU(), torch.randn(2, 3))


def test_a_process_freeze_is_left_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        onnx_export.dynamo_export(nn.ReLU(), torch.randn(2, 3))
        # Not unfrozen by the export (frozen objects freed by reference counting leave).
        assert gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()


# -- one session for every check; the checks still refuse what they should (#39) ---------


def test_one_export_opens_one_session_for_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []
    real_open = _runtime.open_session

    def counted(*args: object, **kwargs: object) -> object:
        opened.append(args)
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_runtime, "open_session", counted)
    torch.manual_seed(0)
    model = _Counted().eval()
    options = ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, torch.randn(4, 4), export_options=options)
    # The served-axes check (at 3), the parity check (at 4), the edge probe (at 1): one
    # eager run each, and ONNX Runtime runs on one session.
    assert model.batches == [3, 4, 1]
    assert len(opened) == 1
    assert_onnx_program_close(program, model, torch.randn(2, 4))
    assert len(opened) == 1  # later calls reuse it too


@torch.library.custom_op("check_costs_test::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    """``2 * x``."""
    return x * 2


@doubled.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _doubled_at_three_rows(x: Any) -> Any:
    """Right at the example's 3 rows only: the Reshape holds them."""
    return op.Reshape(op.Add(x, x), op.Constant(value_ints=[3, 4]))


class _Doubled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return doubled(x) + 1


def test_the_served_axes_check_still_refuses_a_file_that_fails_at_a_second_size() -> None:
    # ONNX Runtime fails at the second size; no capture at other sizes helps.
    registry = onnx_export.OnnxRegistry()
    registry.register_op("check_costs_test::doubled", _doubled_at_three_rows)
    options = ExportOptions(dynamic_shapes={"x": {0: "rows"}}, onnx_registry=registry)
    with pytest.raises(ConversionError, match="declares dynamic axes it cannot serve") as got:
        onnx_export.dynamo_export(_Doubled(), torch.randn(3, 4), export_options=options)
    assert "ONNX Runtime failed" in str(got.value) and "holds 3" in str(got.value)
    # Static, the same function is right: the check refused the axis, not the function.
    static = ExportOptions(onnx_registry=registry)
    program = onnx_export.dynamo_export(_Doubled(), torch.randn(3, 4), export_options=static)
    assert_onnx_program_close(program, _Doubled(), torch.randn(3, 4))


# -- the session is built without copying the weights through protobuf (#39) ------------


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(64, 256), nn.Linear(256, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).relu())


def test_the_session_takes_the_weights_as_arrays_and_answers_as_the_file() -> None:
    torch.manual_seed(0)
    model = _Wide().eval()
    options = ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, torch.randn(3, 4 * 16), export_options=options)
    assert program._session_weights  # the weights went to ONNX Runtime as arrays
    x = torch.randn(5, 64)
    from_file = onnx_export.adapters.OnnxModule(
        program.model_proto.SerializeToString(), program.adapter_spec
    )
    torch.testing.assert_close(program(x), from_file(x), rtol=0, atol=0)
    assert_onnx_program_close(program, model, x)


def test_the_session_keeps_the_weights_of_the_export_not_later_edits() -> None:
    # The exported tensors share memory with the module's parameters: ONNX Runtime holds
    # its own copy, as it did when it parsed the serialized model.
    torch.manual_seed(0)
    model = _Wide().eval()
    program = onnx_export.dynamo_export(model, torch.randn(2, 64))
    x = torch.randn(2, 64)
    before = program(x)
    with torch.no_grad():
        model.first.weight.mul_(2.0)
        model.second.weight.zero_()
    torch.testing.assert_close(program(x), before, rtol=0, atol=0)


def test_a_bfloat16_model_takes_the_serialized_route_and_runs_upcast() -> None:
    model = nn.Linear(64, 32).to(torch.bfloat16).eval()
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    program = onnx_export.dynamo_export(model, x)
    result = program.verify(x)
    assert result.ok and "upcast" in result.note
    assert program._session_weights == []


# -- the tolerance measure: float32 first, float64 where it could matter (#39) -----------


def _float64_units(got: torch.Tensor, want: torch.Tensor) -> float:
    a, b = got.double(), want.double()
    diff = ((a - b).abs() / (1e-4 + 1e-3 * b.abs())).masked_fill(a.isnan() & b.isnan(), 0.0)
    return float(diff.nan_to_num(float("inf")).max())


@pytest.mark.parametrize(
    "offset",
    [0.0, 1e-7, 5e-5, 1e-4, 2e-4, 1e-3, 1e-2, 1.0],
    ids=lambda v: f"offset{v:g}",
)
def test_tolerance_units_give_the_float64_verdicts(offset: float) -> None:
    from onnx_export.program._tolerance import tolerance_units

    torch.manual_seed(0)
    want = torch.randn(40, 30) * torch.logspace(-6, 6, 30)
    got = want + offset * torch.randn(40, 30)
    exact = _float64_units(got, want)
    units = tolerance_units(got, want)
    for limit in (1.0, 10.0):  # right at the example; another size, the edge probe
        assert (units <= limit) == (exact <= limit)
    assert units == pytest.approx(exact, rel=1e-5, abs=1e-6)


def test_tolerance_units_treat_nan_and_infinity_as_before() -> None:
    from onnx_export.program._tolerance import tolerance_units

    nan, inf = float("nan"), float("inf")
    want = torch.tensor([1.0, nan, 2.0, inf])
    assert tolerance_units(want.clone(), want) == _float64_units(want.clone(), want)
    for got in ([1.0, 0.0, 2.0, inf], [1.0, nan, 2.0, -inf], [1.0, nan, nan, inf]):
        assert tolerance_units(torch.tensor(got), want) > 10
    assert tolerance_units(torch.empty(0), torch.empty(0)) == 0.0
    half = torch.tensor([1.0, 2.0], dtype=torch.float16)
    assert tolerance_units(half, half.float()) == 0.0  # mixed dtypes: float64, as before
