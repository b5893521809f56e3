"""LSTM, GRU and RNN keep a dynamic time axis: ONNX recurrent nodes, any length.

Each model is exported with the time (and batch) axis dynamic from one example length,
then run in ONNX Runtime at three lengths the example did not have, against eager.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close

_LENGTHS = (1, 4, 13)  # the example has 7


def _ops(program: onnx_export.ONNXProgram) -> Counter[str]:
    return Counter(node.op_type for node in program.model.graph)


class _WithStates(nn.Module):
    """The layer called with initial states, returning every output."""

    def __init__(self, layer: nn.RNNBase) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None = None) -> Any:
        if c0 is None:
            return self.layer(x, h0)
        return self.layer(x, (h0, c0))


def _layer(kind: str, layers: int, bidirectional: bool, batch_first: bool) -> nn.RNNBase:
    torch.manual_seed(0)
    make = {
        "lstm": nn.LSTM,
        "gru": nn.GRU,
        "rnn_tanh": nn.RNN,
        "rnn_relu": lambda *a, **k: nn.RNN(*a, nonlinearity="relu", **k),
    }[kind]
    return make(  # type: ignore[no-any-return]
        4, 6, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first
    ).eval()


def _x(batch: int, time: int, batch_first: bool) -> torch.Tensor:
    return torch.randn(batch, time, 4) if batch_first else torch.randn(time, batch, 4)


_NODE = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
_FORMS = [
    pytest.param(1, False, False, id="one_layer"),
    pytest.param(2, True, True, id="two_layers_bidirectional_batch_first"),
    pytest.param(3, False, True, id="three_layers_batch_first"),
]


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize(("layers", "bidirectional", "batch_first"), _FORMS)
def test_time_axis_stays_dynamic(
    kind: str, layers: int, bidirectional: bool, batch_first: bool
) -> None:
    layer = _layer(kind, layers, bidirectional, batch_first)
    time_axis, batch_axis = (1, 0) if batch_first else (0, 1)
    options = onnx_export.ExportOptions(
        dynamic_shapes={"input": {time_axis: "time", batch_axis: "batch"}}
    )
    program = onnx_export.dynamo_export(layer, _x(2, 7, batch_first), export_options=options)
    shape = program.model.graph.inputs[0].shape
    assert shape is not None and str(shape[time_axis]) == "time"
    ops = _ops(program)
    assert ops[_NODE[kind]] == layers and not {"Loop", "Scan", "MatMul", "Gemm"} & set(ops)
    for time in _LENGTHS:
        assert_onnx_program_close(program, layer, _x(3, time, batch_first))


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_initial_states_as_inputs(kind: str) -> None:
    layer = _layer(kind, 2, True, False)
    model = _WithStates(layer)

    def inputs(batch: int, time: int) -> tuple[torch.Tensor, ...]:
        states = [torch.randn(4, batch, 6) for _ in range(2 if kind == "lstm" else 1)]
        return (_x(batch, time, False), *states)

    shapes: dict[str, Any] = {"x": {0: "time", 1: "batch"}, "h0": {1: "batch"}}
    if kind == "lstm":
        shapes["c0"] = {1: "batch"}
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    program = onnx_export.dynamo_export(model, *inputs(2, 7), export_options=options)
    assert _ops(program)[_NODE[kind]] == 2
    for time in _LENGTHS:
        assert_onnx_program_close(program, model, *inputs(3, time))


class TextClassifier(nn.Module):
    """What a new user tried: embedding, LSTM, the last step's state, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, (h, _) = self.lstm(self.embed(tokens))
        return self.head(h[-1]) + out.mean(1)[:, :3]


def test_text_classifier_exports_with_a_dynamic_sequence() -> None:
    torch.manual_seed(0)
    model = TextClassifier().eval()
    options = onnx_export.ExportOptions(dynamic_shapes={"tokens": {0: "batch", 1: "seq"}})
    program = onnx_export.dynamo_export(
        model, torch.randint(0, 50, (2, 12)), export_options=options
    )
    assert [str(d) for d in program.model.graph.inputs[0].shape or ()] == ["batch", "seq"]
    for seq in (3, 20, 40):
        assert_onnx_program_close(program, model, torch.randint(0, 50, (4, seq)))


def test_unbatched_input_and_static_export() -> None:
    layer = _layer("gru", 1, True, False)
    x = torch.randn(7, 4)  # (time, features): nn.GRU adds the batch axis itself
    program = onnx_export.dynamo_export(
        layer, x, export_options=onnx_export.ExportOptions(dynamic_shapes={"input": {0: "t"}})
    )
    for time in _LENGTHS:
        assert_onnx_program_close(program, layer, torch.randn(time, 4))
    static = onnx_export.dynamo_export(layer, x)
    assert _ops(static)["GRU"] == 1
    assert_onnx_program_close(static, layer, x)


_FACTORY = """
import torch


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, batch):
        out, (h, _) = self.lstm(self.embed(batch["tokens"]))
        return self.head(h[-1])


def make():
    torch.manual_seed(0)
    return Classifier().eval(), ({"tokens": torch.randint(0, 50, (2, 12))},)
"""


def test_cli_lstm_classifier_keeps_the_sequence_dynamic(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The new user's run: `--dynamic batch.tokens:1=seq` gave exit 0 and a static [2, 12].
    from onnx_export.cli import main

    (tmp_path / "classifier_factory.py").write_text(_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "m.onnx"
    args = ["export", "classifier_factory:make", "-o", str(out), "--dynamic", "batch.tokens:1=seq"]
    assert main(args) == 0
    assert "batch.tokens[2,seq]" in capsys.readouterr().out
    import classifier_factory  # type: ignore[import-not-found]

    model, _ = classifier_factory.make()
    loaded = onnx_export.load(out)
    for seq in (3, 20, 31):
        tokens = torch.randint(0, 50, (2, seq))
        with torch.no_grad():
            expected = model({"tokens": tokens})
        got = torch.as_tensor(loaded({"tokens": tokens.numpy()}))
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
