"""The values ONNX functions get support what torchlib's code does with them under torch.onnx.

Torchlib's ``aten_stft`` compares ``op.Shape(window) < n_fft``, its ``aten_linspace``
compares two values; a user's function may use ``%``, ``**``, ``@``, ``&``, ``|``, ``~``
and ``.rank``. Each model is exported, run in ONNX Runtime and compared with eager; the
values stay hashable by identity, as the translator needs.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import pytest
import torch
from torch.export import Dim

import onnx_export
from onnx_export.translation._builder import RecordedValue, TaggingGraphBuilder
from onnx_export.translation._recorder import recording
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class Stft(torch.nn.Module):
    def __init__(self, n_fft: int, win_length: int | None, **kwargs: Any) -> None:
        super().__init__()
        self.n_fft, self.win_length, self.kwargs = n_fft, win_length, kwargs
        self.register_buffer("window", torch.hann_window(win_length or n_fft))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spectrum = torch.stft(
            x,
            self.n_fft,
            hop_length=4,
            win_length=self.win_length,
            window=self.window,
            return_complex=True,
            **self.kwargs,
        )
        return torch.view_as_real(spectrum)


STFT = {
    "window_of_n_fft": (Stft(16, None), torch.randn(64)),
    "shorter_window": (Stft(16, 10), torch.randn(64)),
    "batched_normalized": (Stft(8, 8, normalized=True, center=False), torch.randn(3, 40)),
    "two_sided": (Stft(8, 6, onesided=False, center=False), torch.randn(2, 33)),
}


@pytest.mark.parametrize("name", list(STFT))
def test_stft_with_window_matches_eager(name: str) -> None:
    model, x = STFT[name]
    export_and_check(model, x, atol=1e-4)


def test_stft_dynamic_signal_length() -> None:
    model = Stft(16, 12)
    options = onnx_export.ExportOptions(dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    program = onnx_export.dynamo_export(model, torch.randn(2, 64), export_options=options)
    for length in (48, 97):
        assert_onnx_program_close(program, model, torch.randn(3, length), atol=1e-4)


class Linspace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.linspace(-1.5, 2.0, 7)


def test_torchlib_linspace_compares_values() -> None:
    """Torchlib's own ``aten_linspace`` (``rg < op.Div(...)``) as the user's function."""
    from onnxscript.function_libs.torch_lib.ops.core import aten_linspace

    registry = onnx_export.OnnxRegistry()
    registry.register_op("aten::linspace", aten_linspace)
    options = onnx_export.ExportOptions(onnx_registry=registry)
    export_and_check(Linspace(), torch.randn(3, 7), options=options)


@torch.library.custom_op("onnx_export_test::operators", mutates_args=())
def operators(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    ints = x.to(torch.int64)
    flags = ((x < 0.5) & (x >= -1.0)) | ~(x > 1.5)
    return (x**2) % 1.5 + (x @ m) + (ints % 3).to(x.dtype) + flags.to(x.dtype) * x.dim()


@operators.register_fake
def _(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _operators_onnx(x: Any, m: Any) -> Any:
    from onnxscript import opset18 as op

    ints = op.Cast(x, to=int(ir.DataType.INT64))
    flags = ((x < 0.5) & (x >= -1.0)) | ~(x > 1.5)
    modulo = op.Cast(ints % 3, to=int(ir.DataType.FLOAT))
    return (x**2) % 1.5 + (x @ m) + modulo + op.Cast(flags, to=1) * float(x.rank)


class Operators(torch.nn.Module):
    def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return operators(x, m)


def test_python_operators_on_values_record_ops() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op(torch.ops.onnx_export_test.operators.default, _operators_onnx)
    options = onnx_export.ExportOptions(onnx_registry=registry)
    x = torch.linspace(-3.0, 3.0, 12).reshape(3, 4)
    export_and_check(Operators(), x, torch.randn(4, 4), options=options)


def test_recorded_values_keep_identity() -> None:
    graph = ir.Graph([], [], nodes=[], opset_imports={"": 18})
    builder = TaggingGraphBuilder(graph)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    with recording(builder):
        y = builder.op.Relu(x)
        z = builder.op.Relu(x)
        less = y < 1.0
    assert isinstance(y, RecordedValue) and isinstance(less, RecordedValue)
    assert less.producer() is not None and less.producer().op_type == "Less"
    assert y != z and y == y and len({y, z, y}) == 2
    assert {y: 1}[y] == 1 and y.rank == 1
