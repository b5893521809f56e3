"""The export checks itself: parity with the model as deployed, training mode, valid graphs.

Issue #28, items 2, 4 and 6: ``dynamo_export`` compares ONNX Runtime with the model run in
eval mode under no_grad where that is cheap (a mismatch is a ``ParityWarning`` at the
model's line of the first diverging node, or names the cause), warns about a model
exported in training mode at the user's call, and ``save`` refuses a graph that ONNX's
checker refuses, with our own error naming the node.
"""

from __future__ import annotations

import pathlib
import warnings
from collections.abc import Iterator

import numpy as np
import onnx_ir as ir
import pytest
import torch
from onnxscript import opset18 as op

import onnx_export
from onnx_export.cli import main
from onnx_export.diagnostics import DiagnosticOptions, Level
from onnx_export.errors import (
    InvalidGraphError,
    ParityWarning,
    TrainingModeWarning,
    VerificationError,
)

NOTES = DiagnosticOptions(verbosity=Level.NOTE)
THIS_FILE = pathlib.Path(__file__).resolve()


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    yield


def _export(
    model: torch.nn.Module, *args: object, kwargs: dict | None = None, **options: object
) -> tuple[object, list]:
    """The program and the warnings the export issued (all of them, as the user sees them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnx_export.dynamo_export(
            model,
            *args,
            **(kwargs or {}),
            export_options=onnx_export.ExportOptions(diagnostic_options=NOTES, **options),  # type: ignore[arg-type]  # options are ExportOptions' fields
        )
    return program, [
        w for w in caught if issubclass(w.category, (ParityWarning, TrainingModeWarning))
    ]


def _rules(program: object) -> list[str]:
    return [d.rule.id for d in program.diagnostic_context.diagnostics]  # type: ignore[attr-defined]  # an ONNXProgram


class _Relu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))  # the line a wrong relu is reported at


def _relu_line() -> int:
    source = THIS_FILE.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(source, 1) if "the line a wrong relu" in line)


# -- the default check -------------------------------------------------------------------


def test_a_small_model_is_checked_by_default_and_passes_quietly() -> None:
    model, x = _Relu().eval(), torch.randn(2, 4)
    program, caught = _export(model, x)
    assert caught == []
    assert "verify" in program.stage_times  # type: ignore[attr-defined]  # an ONNXProgram
    assert "OXE0012" in _rules(program) and "OXE0022" not in _rules(program)
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x))  # type: ignore[operator]  # an ONNXProgram


def _wrong_relu_registry() -> onnx_export.OnnxRegistry:
    registry = onnx_export.OnnxRegistry()

    def relu_as_identity(x):  # type: ignore[no-untyped-def]  # an ONNX function
        return op.Identity(x)

    registry.register_op(torch.ops.aten.relu.default, relu_as_identity)
    return registry


def test_a_wrong_translation_is_a_parity_warning_at_the_models_line() -> None:
    model, x = _Relu().eval(), torch.randn(8, 4)
    program, caught = _export(model, x, onnx_registry=_wrong_relu_registry())
    assert [w.category for w in caught] == [ParityWarning]
    warning = caught[0]
    assert (pathlib.Path(warning.filename).resolve(), warning.lineno) == (THIS_FILE, _relu_line())
    message = str(warning.message)
    assert "relu" in message and "relu_as_identity" in message, message
    assert "eval mode under torch.no_grad()" in message
    assert "OXE0022" in _rules(program)
    # The file still computes what the wrong function says: the warning is the only sign.
    assert not np.allclose(program(x).numpy(), model(x).detach().numpy(), atol=1e-4)  # type: ignore[operator]  # an ONNXProgram


class _TwoInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * ids[:, None]  # the line a wrong relu is reported at


def test_keyword_inputs_out_of_order_still_name_the_diverging_node() -> None:
    """Keyword inputs given in another order than ``forward``'s (a VLM's
    ``pixel_values=..., input_ids=...``): the culprit search fed each to the other's
    graph input ("Unexpected input data type") and the default check, failing itself,
    went quiet: a wrong export without a warning. A mismatch is always a warning."""
    model = _TwoInputs().eval()
    inputs = {"ids": torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), "x": torch.randn(8, 4)}
    _, caught = _export(model, kwargs=inputs, onnx_registry=_wrong_relu_registry())
    assert [w.category for w in caught] == [ParityWarning]
    message = str(caught[0].message)
    assert "relu_as_identity" in message, message
    assert pathlib.Path(caught[0].filename).resolve() == THIS_FILE


def test_verify_true_makes_the_mismatch_an_error() -> None:
    model, x = _Relu().eval(), torch.randn(8, 4)
    with pytest.raises(VerificationError, match=r"relu .*relu_as_identity"):
        onnx_export.dynamo_export(
            model,
            x,
            export_options=onnx_export.ExportOptions(
                verify=True, onnx_registry=_wrong_relu_registry()
            ),
        )


def test_verify_false_skips_the_check_and_says_so() -> None:
    model, x = _Relu().eval(), torch.randn(8, 4)
    program, caught = _export(model, x, verify=False, onnx_registry=_wrong_relu_registry())
    assert caught == []
    assert "verify" not in program.stage_times  # type: ignore[attr-defined]  # an ONNXProgram
    skipped = [d for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0023"]  # type: ignore[attr-defined]  # an ONNXProgram
    assert len(skipped) == 1 and "verify=False" in skipped[0].message


class _Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


def test_a_model_that_draws_random_numbers_is_not_compared() -> None:
    """Not compared (nothing to compare), and said where the user sees it: in eval mode too
    (ViTMAE's masking noise, SpeechT5's always-on dropout) the outputs are ORT's draws."""
    program, caught = _export(_Noisy().eval(), torch.randn(3))
    assert [type(w.message) for w in caught] == [ParityWarning]
    assert "not compared with eager" in str(caught[0].message) and "randn" in str(caught[0].message)
    assert caught[0].filename == __file__  # at the user's call
    skipped = [d.message for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0023"]  # type: ignore[attr-defined]  # an ONNXProgram
    assert len(skipped) == 1 and "random numbers" in skipped[0] and "randn" in skipped[0]


def test_a_fake_mode_export_is_not_compared() -> None:
    with onnx_export.enable_fake_mode():
        model = torch.nn.Linear(4, 3)
        x = torch.randn(2, 4)
    program, caught = _export(model.eval(), x)
    assert caught == []
    skipped = [d.message for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0023"]  # type: ignore[attr-defined]  # an ONNXProgram
    assert len(skipped) == 1 and "fake" in skipped[0]


# -- one eager reference: the model as deployed ------------------------------------------


def _encoder() -> torch.nn.TransformerEncoder:
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2).eval()


_PADDING = torch.tensor([[False] * 5, [False, False, False, True, True]])


def test_transformer_encoder_with_padding_warns_of_the_fast_path() -> None:
    encoder, src = _encoder(), torch.randn(2, 5, 16)
    program, caught = _export(encoder, src, kwargs={"src_key_padding_mask": _PADDING})
    assert [w.category for w in caught] == [ParityWarning]
    message = str(caught[0].message)
    assert "TransformerEncoder" in message and "padded positions" in message, message
    assert pathlib.Path(caught[0].filename).resolve() == THIS_FILE  # at the user's call
    result = program.verify(src, src_key_padding_mask=_PADDING)  # type: ignore[attr-defined]  # an ONNXProgram
    assert not result.ok and result.culprit is None
    assert "fast path" in result.cause and result.reference.startswith("the model in eval")
    # What differs is the padding: the positions a mask keeps agree.
    with torch.no_grad():
        expected = encoder(src, src_key_padding_mask=_PADDING)
    got = program(src, src_key_padding_mask=_PADDING)  # type: ignore[operator]  # an ONNXProgram
    torch.testing.assert_close(got[~_PADDING], expected[~_PADDING], rtol=1e-4, atol=1e-4)


def test_transformer_encoder_without_padding_is_checked_and_agrees() -> None:
    encoder, src = _encoder(), torch.randn(2, 5, 16)
    program, caught = _export(encoder, src)
    assert caught == []
    with torch.no_grad():
        torch.testing.assert_close(program(src), encoder(src), rtol=1e-4, atol=1e-4)  # type: ignore[operator]  # an ONNXProgram


def _conv_bn() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())


def test_a_model_in_training_mode_is_warned_at_the_users_call() -> None:
    model, x = _conv_bn(), torch.randn(2, 3, 8, 8)
    model[1].running_mean.fill_(0.5)
    program, caught = _export(model, x)
    categories = [w.category for w in caught]
    assert categories == [TrainingModeWarning, ParityWarning], [str(w.message) for w in caught]
    training, parity = caught
    assert pathlib.Path(training.filename).resolve() == THIS_FILE
    assert "1 (BatchNorm2d)" in str(training.message) and "model.eval()" in str(training.message)
    assert "training mode" in str(parity.message)
    assert {"OXE0025", "OXE0022"} <= set(_rules(program))
    # The check ran the model in eval mode and put everything back as it was.
    assert model.training and model[1].training
    torch.testing.assert_close(model[1].running_mean, torch.full((4,), 0.5))
    # The file computes train mode's batch statistics, as the warning says.
    expected = model(x)
    torch.testing.assert_close(program(x), expected, rtol=1e-4, atol=1e-4)  # type: ignore[operator]  # an ONNXProgram


def test_the_same_model_in_eval_mode_is_not_warned() -> None:
    model, x = _conv_bn().eval(), torch.randn(2, 3, 8, 8)
    program, caught = _export(model, x)
    assert caught == []
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-4)  # type: ignore[operator]  # an ONNXProgram


@pytest.mark.parametrize(
    "model",
    [torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.0))],
    ids=["linear", "dropout-p0"],
)
def test_training_mode_that_changes_nothing_is_not_warned(model: torch.nn.Module) -> None:
    assert model.training
    x = torch.randn(2, 4)
    program, caught = _export(model, x)
    assert caught == []
    torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)  # type: ignore[operator]  # an ONNXProgram


# -- the checker pass --------------------------------------------------------------------


def _break_types(program: object) -> str:
    """Insert ``Add(float, int64)`` before the graph's Relu (a type error); its name."""
    graph = program.model.graph  # type: ignore[attr-defined]  # an ONNXProgram
    relu = next(n for n in graph if n.op_type == "Relu")
    constant = ir.node("Constant", [], attributes={"value": ir.tensor(np.array([1], np.int64))})
    add = ir.node("Add", [relu.inputs[0], constant.outputs[0]], name="bad_add")
    add.metadata_props.update(relu.metadata_props)
    graph.insert_before(relu, [constant, add])
    relu.replace_input_with(0, add.outputs[0])
    return "bad_add"


def test_save_refuses_an_invalid_graph_with_our_error(tmp_path: pathlib.Path) -> None:
    model, x = _Relu().eval(), torch.randn(2, 4)
    program, _ = _export(model, x, verify=False)
    target = tmp_path / "m.onnx"
    program.save(target)  # type: ignore[attr-defined]  # an ONNXProgram
    before = target.read_bytes()
    node = _break_types(program)
    with pytest.raises(InvalidGraphError) as info:
        program.save(target)  # type: ignore[attr-defined]  # an ONNXProgram
    error = info.value
    assert (error.node, error.op) == (node, "Add")
    assert error.where.endswith(f"{THIS_FILE.name}:{_relu_line()}"), error.where
    assert "inconsistent type" in error.reason or "Type Error" in error.reason
    assert "Nothing was written" in str(error)
    assert target.read_bytes() == before  # the earlier file is untouched
    assert "OXE0024" in _rules(program)


def test_save_checks_a_model_whose_weights_are_checked_as_inputs(tmp_path: pathlib.Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU()).eval()
    x = torch.randn(2, 256)
    program, _ = _export(model, x, verify=False)
    path = program.save(tmp_path / "big.onnx")  # type: ignore[attr-defined]  # an ONNXProgram
    assert program.stage_times["check"] > 0.0  # type: ignore[attr-defined]  # an ONNXProgram
    loaded = onnx_export.load(path)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)


# -- the command line --------------------------------------------------------------------

FACTORIES = """
import torch


def bn_train():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    return model, (torch.randn(2, 3, 8, 8),)
"""


@pytest.fixture
def factories(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "factories.py"
    path.write_text(FACTORIES, encoding="utf-8")
    return path


def test_cli_export_prints_the_training_and_parity_warnings(
    factories: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = factories.parent / "bn.onnx"
    assert main(["export", f"{factories}:bn_train", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: The model is exported in training mode" in err, err
    assert "warning: The exported model's outputs differ from eager PyTorch" in err, err
    assert "Traceback" not in err
    # The file computes train mode's numbers; verify compares with eval mode and says so.
    assert main(["verify", f"{factories}:bn_train", str(out)]) == 1
    captured = capsys.readouterr()
    assert "warning: the factory's model is in training mode" in captured.err
    assert "eval mode, no grad" in captured.out and "NO" in captured.out


def test_cli_export_no_verify_skips_the_parity_check(
    factories: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = factories.parent / "bn.onnx"
    assert main(["export", f"{factories}:bn_train", "-o", str(out), "--no-verify"]) == 0
    err = capsys.readouterr().err
    assert "warning: The model is exported in training mode" in err
    assert "outputs differ" not in err
    model = onnx_export.load(out)
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(model(x), eager(x), rtol=1e-4, atol=1e-4)  # train mode's


@pytest.mark.parametrize("value", ["yes", 1.0], ids=["str", "float"])
def test_verify_accepts_only_none_true_or_false(value: object) -> None:
    with pytest.raises(ValueError, match=r"verify must be None .*True .*False"):
        onnx_export.ExportOptions(verify=value)  # type: ignore[arg-type]  # the wrong type on purpose


def test_an_exported_program_is_compared_with_itself_as_traced() -> None:
    model, x = _Relu().eval(), torch.randn(8, 4)
    exported = torch.export.export(model, (x,))
    program, caught = _export(exported, x, onnx_registry=_wrong_relu_registry())
    assert [w.category for w in caught] == [ParityWarning]
    result = program.verify(x)  # type: ignore[attr-defined]  # an ONNXProgram
    assert result.reference.startswith("the exported program") and result.culprit is not None


class _MixedOr(torch.nn.Module):
    """cpmant's attention mask: an int32 tensor ``|`` a bool one (torch promotes to int32)."""

    def forward(self, context: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return context[:, None, :] | (x[:, :, None] > 0)


def test_bitwise_dunders_promote_mixed_dtypes_so_the_graph_is_valid(tmp_path: pathlib.Path) -> None:
    context = torch.tensor([[0, 1, 0], [1, 1, 0]], dtype=torch.int32)
    x = torch.randn(2, 3)
    program, caught = _export(_MixedOr(), context, x)
    assert caught == []  # checked by default, and it agrees
    loaded = onnx_export.load(program.save(tmp_path / "or.onnx"))  # type: ignore[attr-defined]  # an ONNXProgram
    c, y = torch.randint(0, 2, (2, 3), dtype=torch.int32), torch.randn(2, 3)
    torch.testing.assert_close(loaded(c, y), _MixedOr()(c, y))


class TiedTopK(torch.nn.Module):
    """Top-3 of rows that are all equal (a fully masked row's uniform softmax)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = x.masked_fill(x > -1e9, -1e4).softmax(-1)
        return scores.topk(3, dim=-1)


def test_indices_that_differ_only_among_tied_values_say_so() -> None:
    # torch's topk gives indices 6, 5, 4 for eight equal scores; ONNX's TopK gives 0, 1, 2.
    # The warning names the ties, not a graph that "accumulates" a difference.
    x = torch.randn(2, 8)
    with pytest.warns(ParityWarning, match="differ only where top-k values tie") as record:
        program = onnx_export.dynamo_export(TiedTopK(), x)
    assert "accumulates" not in str(record[0].message)
    values, indices = program(x)
    want_values, want_indices = TiedTopK()(x)
    torch.testing.assert_close(values, want_values)
    assert indices.tolist() == [[0, 1, 2], [0, 1, 2]] != want_indices.tolist()


def test_top_k_without_ties_is_not_warned() -> None:
    class Distinct(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.topk(3, dim=-1).indices

    with warnings.catch_warnings():
        warnings.simplefilter("error", ParityWarning)
        program = onnx_export.dynamo_export(Distinct(), torch.randn(2, 8))
    x = torch.randn(2, 8)
    assert program(x).tolist() == Distinct()(x).tolist()
