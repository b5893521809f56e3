"""Complex arithmetic with real operands, through ``irfft``/``istft``, at dynamic sizes.

A vocoder's iSTFT head builds its spectrum as ``exp(mag) * (cos(phase) + 1j * sin(phase))``
(real tensors times and plus complex ones) and inverts it; exported with a dynamic frame
axis it must run in ONNX Runtime and match eager at frame counts the example did not have.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class VocoderHead(nn.Module):
    """Magnitude and phase from a 1x1 convolution, then the inverse transform."""

    def __init__(self, inverse: str, n_fft: int = 16, hop: int = 4) -> None:
        super().__init__()
        self.inverse, self.n_fft, self.hop = inverse, n_fft, hop
        self.proj = nn.Conv1d(8, n_fft + 2, 1)
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        mag, phase = self.proj(features).chunk(2, dim=1)
        spectrum = torch.exp(mag) * (torch.cos(phase) + 1j * torch.sin(phase))
        if self.inverse == "istft":
            return torch.istft(
                spectrum, self.n_fft, self.hop, self.n_fft, window=self.window, center=True
            )
        return torch.fft.irfft(spectrum, n=self.n_fft, dim=1)


def _features(frames: int, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 8, frames, generator=torch.Generator().manual_seed(frames))


@pytest.mark.parametrize("inverse", ["irfft", "istft"])
def test_a_vocoder_head_at_other_frame_counts(inverse: str) -> None:
    torch.manual_seed(0)
    model = VocoderHead(inverse).eval()
    options = onnx_export.ExportOptions(dynamic_shapes={"features": {0: "batch", 2: "frames"}})
    program = onnx_export.dynamo_export(model, _features(10), export_options=options)
    for frames, batch in ((10, 2), (7, 2), (23, 1), (2, 3)):
        assert_onnx_program_close(program, model, _features(frames, batch), atol=1e-4)


class Mixed(nn.Module):
    """Each arithmetic op with a real and a complex operand, broadcast both ways."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, real: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        z = torch.view_as_complex(pair)  # (batch, frames)
        column = real[:, :1]  # (batch, 1): broadcast along the frames
        results = {
            "real_times_complex": (real * z, z * column),
            "real_plus_complex": (real + z, z + column),
            "complex_minus_real": (z - real, column - z),
            "complex_over_real": (z / (real.abs() + 1.0), (column.abs() + 1.0) / (z + 2.0)),
        }[self.name]
        return torch.view_as_real(results[0] + results[1])


@pytest.mark.parametrize(
    "name", ["real_times_complex", "real_plus_complex", "complex_minus_real", "complex_over_real"]
)
def test_real_and_complex_operands_broadcast(name: str) -> None:
    def inputs(batch: int, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(batch * 10 + frames)
        return torch.randn(batch, frames, generator=g), torch.randn(batch, frames, 2, generator=g)

    dynamic = {"real": {0: "batch", 1: "frames"}, "pair": {0: "batch", 1: "frames"}}
    options = onnx_export.ExportOptions(dynamic_shapes=dynamic)
    program = onnx_export.dynamo_export(Mixed(name), *inputs(2, 5), export_options=options)
    for size in ((2, 5), (3, 9), (1, 1)):
        assert_onnx_program_close(program, Mixed(name), *inputs(*size), atol=1e-4)
