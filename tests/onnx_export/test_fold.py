"""Weights folded into new, lazily computed initializers; one-node GELU and AveragePool."""

from __future__ import annotations

import collections
import math
import pathlib

import onnx_ir as ir
import pytest
import torch
from torch import nn

import onnx_export
from onnx_export._fake import WeightPlaceholder, weight_values
from onnx_export.diagnostics import DiagnosticOptions, Level
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class _Linear3d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class _ConvBN(nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def _ops(program: onnx_export.ONNXProgram) -> collections.Counter[str]:
    return collections.Counter(node.op_type for node in program.model.graph)


def _seeded(make: type[nn.Module], *args: bool) -> nn.Module:
    torch.manual_seed(0)
    return make(*args).eval()


def test_a_weight_transpose_becomes_a_named_lazy_initializer() -> None:
    model, x = _seeded(_Linear3d), torch.randn(2, 5, 8)
    program = onnx_export.dynamo_export(model, x)
    assert "Transpose" not in _ops(program)
    folded = program.model.graph.initializers["fc.weight.T"]
    assert isinstance(folded.const_value, ir.LazyTensor)
    assert list(folded.const_value.shape) == [8, 16]
    assert "fc.weight" in weight_values(program.model)  # still replaceable by name
    assert_onnx_program_close(program, model, x)


@pytest.mark.parametrize("bias", [True, False], ids=["conv_bias", "no_conv_bias"])
def test_batch_norm_folds_into_the_conv(bias: bool) -> None:
    model, x = _seeded(_ConvBN, bias), torch.randn(2, 3, 8, 8)
    program = onnx_export.dynamo_export(model, x)
    assert _ops(program) == {"Conv": 1, "Relu": 1}
    names = set(program.model.graph.initializers)
    assert "conv.weight.fold(bn)" in names
    assert ("conv.bias.fold(bn)" if bias else "bn.bias.fold(conv)") in names
    assert_onnx_program_close(program, model, x)


def test_lstm_gate_reordering_is_folded() -> None:
    torch.manual_seed(0)
    model, x = nn.LSTM(4, 8, batch_first=True).eval(), torch.randn(2, 3, 4)
    program = onnx_export.dynamo_export(model, x)
    assert not {"Slice", "Concat"} & set(_ops(program))
    assert_onnx_program_close(program, model, x)


def test_folded_weights_come_from_the_state_given_at_save(tmp_path: pathlib.Path) -> None:
    x = torch.randn(2, 3, 8, 8)
    program = onnx_export.dynamo_export(_seeded(_ConvBN, True), x)
    torch.manual_seed(1)
    other = _ConvBN(True).eval()
    path = program.save(tmp_path / "m.onnx", model_state=other.state_dict())
    assert_onnx_program_close(onnx_export.load(path), other, x)  # type: ignore[arg-type]


def test_a_fake_export_stays_weight_free_and_saves_folded_weights(
    tmp_path: pathlib.Path,
) -> None:
    with onnx_export.enable_fake_mode():
        fake = _ConvBN(True).eval()
        model = nn.Sequential(fake, nn.Flatten(), nn.Linear(4 * 64, 3)).eval()
        x = torch.randn(2, 3, 8, 8)
    program = onnx_export.dynamo_export(model, x)
    sources = weight_values(program.model)
    assert all(isinstance(v.const_value, WeightPlaceholder) for v in sources.values())
    with pytest.raises(onnx_export.SerializationError, match="model_state"):
        program.save(tmp_path / "no_weights.onnx")
    real = nn.Sequential(_seeded(_ConvBN, True), nn.Flatten(), nn.Linear(4 * 64, 3)).eval()
    path = program.save(tmp_path / "m.onnx", model_state=real.state_dict())
    x = torch.randn(2, 3, 8, 8)
    assert_onnx_program_close(onnx_export.load(path), real, x)  # type: ignore[arg-type]


@pytest.mark.parametrize(("opset", "gelus"), [(18, 0), (20, 1)], ids=["opset18", "opset20"])
def test_exact_gelu_is_one_node_from_opset_20(opset: int, gelus: int) -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.GELU()).eval(), torch.randn(3, 4)
    options = onnx_export.ExportOptions(opset_version=opset)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert _ops(program)["Gelu"] == gelus
    assert _ops(program)["Erf"] == 1 - gelus
    assert_onnx_program_close(program, model, x)


class _NewGelu(nn.Module):
    """GPT-2's ``gelu_new`` written out: ``0.5 * x`` first, then ``* (1 + tanh(...))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


@pytest.mark.parametrize(("opset", "gelus"), [(18, 0), (20, 1)], ids=["opset18", "opset20"])
@pytest.mark.parametrize("written", ["aten", "gelu_new"])
def test_tanh_gelu_is_one_node_from_opset_20(opset: int, gelus: int, written: str) -> None:
    torch.manual_seed(0)
    gelu = nn.GELU(approximate="tanh") if written == "aten" else _NewGelu()
    model = nn.Sequential(nn.Linear(4, 4), gelu).eval()
    x = torch.randn(3, 4) * 3
    options = onnx_export.ExportOptions(opset_version=opset)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert _ops(program)["Gelu"] == gelus
    assert _ops(program)["Tanh"] == 1 - gelus
    if gelus:
        gelu = next(n for n in program.model.graph if n.op_type == "Gelu")
        assert gelu.attributes["approximate"].as_string() == "tanh"
    assert_onnx_program_close(program, model, x)


def test_a_tanh_gelu_with_other_uses_of_its_parts_stays_unfused() -> None:
    class _Shared(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            inner = torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
            return x * (0.5 * (inner + 1.0)), inner

    model, x = _Shared(), torch.randn(3, 4)
    program = onnx_export.dynamo_export(model, x)
    assert _ops(program)["Gelu"] == 0
    assert_onnx_program_close(program, model, x)


@pytest.mark.parametrize("include_pad", [False, True], ids=["exclude_pad", "include_pad"])
@pytest.mark.parametrize(
    ("pool", "size"),
    [((3, 1, 1, False), 6), ((2, 2, 0, True), 8), ((3, 2, 1, True), 7)],
    ids=["padded", "ceil_mode_tiling", "ceil_mode_tiling_padded"],
)
def test_average_pool_is_one_node_when_its_windows_fit(
    include_pad: bool, pool: tuple[int, int, int, bool], size: int
) -> None:
    kernel, stride, padding, ceil = pool  # ceil_mode that adds no window changes nothing
    model = nn.AvgPool2d(kernel, stride, padding, ceil_mode=ceil, count_include_pad=include_pad)
    x = torch.randn(1, 2, size, size)
    program = onnx_export.dynamo_export(model, x)
    assert _ops(program) == {"AveragePool": 1}
    assert_onnx_program_close(program, model, x)


def test_ceil_mode_average_pool_with_a_partial_window_still_matches() -> None:
    model = nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)
    x = torch.randn(1, 2, 7, 7)  # the last window overhangs: ATen's divisor, not ONNX's
    assert_onnx_program_close(onnx_export.dynamo_export(model, x), model, x)


class _Positions(nn.Module):
    """Position embeddings at a static length and a class token expanded to the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.positions = nn.Embedding(16, 4)
        self.cls = nn.Parameter(torch.randn(1, 1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x + self.positions(torch.arange(x.shape[1]))
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), hidden], dim=1)


def test_constant_gathers_and_expands_of_weights_are_folded(tmp_path: pathlib.Path) -> None:
    model, x = _seeded(_Positions), torch.randn(2, 5, 4)
    program = onnx_export.dynamo_export(model, x)
    assert not {"Gather", "Expand"} & set(_ops(program))
    assert_onnx_program_close(program, model, x)
    other = _seeded(_Positions)
    with torch.no_grad():
        other.positions.weight.mul_(2.0)
    path = program.save(tmp_path / "m.onnx", model_state=other.state_dict())
    assert_onnx_program_close(onnx_export.load(path), other, x)  # type: ignore[arg-type]


class _ScaledStdConv(nn.Conv2d):
    """timm's NF-ResNet weight standardisation: ``F.batch_norm`` on the weight, a gain."""

    def __init__(self) -> None:
        super().__init__(3, 4, 3, padding=1)
        self.gain = nn.Parameter(torch.rand(4, 1, 1, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = nn.functional.batch_norm(
            self.weight.reshape(1, self.out_channels, -1),
            None,
            None,
            weight=(self.gain * 0.2).view(-1),
            training=True,
            momentum=0.0,
            eps=1e-6,
        ).reshape_as(self.weight)
        return nn.functional.conv2d(x, weight, self.bias, padding=1)


class _StdConv(nn.Module):
    """``(w - mean) / sqrt(var + eps)`` with ``var_mean``, then a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight
        var, mean = torch.var_mean(w, dim=[1, 2, 3], keepdim=True, unbiased=False)
        return torch.relu(nn.functional.conv2d(x, (w - mean) / torch.sqrt(var + 1e-8), padding=1))


class _RelativeBias(nn.Module):
    """SwinV2-style ``16 * sigmoid(table[index])`` bias added to scores (a constant index)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(9, 2))
        self.register_buffer("index", torch.randint(0, 9, (16,)), persistent=False)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        bias = 16 * torch.sigmoid(self.table[self.index].view(4, 4, 2).permute(2, 0, 1))
        return (scores + bias).softmax(-1)


_COMPUTE_OPS = {"ReduceMean", "Sqrt", "Sub", "Div", "Sigmoid", "Reciprocal", "Gather"}


@pytest.mark.parametrize(
    ("make", "shape"),
    [(_ScaledStdConv, (2, 3, 8, 8)), (_StdConv, (2, 3, 8, 8)), (_RelativeBias, (3, 2, 4, 4))],
    ids=["batch_norm_standardised", "var_mean_standardised", "relative_bias"],
)
def test_computations_on_weights_only_are_folded(
    make: type[nn.Module], shape: tuple[int, ...], tmp_path: pathlib.Path
) -> None:
    model, x = _seeded(make), torch.randn(*shape)
    program = onnx_export.dynamo_export(model, x)
    assert not _COMPUTE_OPS & set(_ops(program)), _ops(program)
    folded = [v for name, v in program.model.graph.initializers.items() if name.endswith(".folded")]
    assert folded and all(isinstance(v.const_value, ir.LazyTensor) for v in folded)
    assert_onnx_program_close(program, model, x)
    torch.manual_seed(3)
    other = make().eval()  # other weights at save: the folded tensors follow them
    for name, buffer in model.named_buffers():  # non-persistent buffers were exported as-is
        if name not in model.state_dict():
            other.get_buffer(name).copy_(buffer)
    path = program.save(tmp_path / "m.onnx", model_state=other.state_dict())
    assert_onnx_program_close(onnx_export.load(path), other, x)  # type: ignore[arg-type]


def test_weight_standardisation_is_folded_before_the_optimizer_sees_it() -> None:
    model, x = _seeded(_ScaledStdConv), torch.randn(2, 3, 8, 8)
    verbose = DiagnosticOptions(verbosity=Level.NOTE)
    options = onnx_export.ExportOptions(diagnostic_options=verbose)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    passes = [d.message for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0008"]
    early = [m for m in passes if "fold_weight_computations (before the optimizer)" in m]
    assert early and passes.index(early[0]) < next(
        i for i, m in enumerate(passes) if "onnxscript.optimizer.optimize" in m
    )
    assert _ops(program) == {"Conv": 1}
    assert_onnx_program_close(program, model, x)


def test_a_fake_export_of_standardised_weights_stays_weight_free(tmp_path: pathlib.Path) -> None:
    with onnx_export.enable_fake_mode():
        model = _ScaledStdConv().eval()
        x = torch.randn(2, 3, 8, 8)
    program = onnx_export.dynamo_export(model, x)
    assert not _COMPUTE_OPS & set(_ops(program))
    sources = weight_values(program.model)
    assert {"weight", "gain"} <= set(sources)
    assert all(isinstance(v.const_value, WeightPlaceholder) for v in sources.values())
    real = _seeded(_ScaledStdConv)
    path = program.save(tmp_path / "m.onnx", model_state=real.state_dict())
    assert_onnx_program_close(onnx_export.load(path), real, torch.randn(2, 3, 8, 8))  # type: ignore[arg-type]
