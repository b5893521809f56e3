"""The OrtValue path (bfloat16 and float8 outputs) keeps 0-d inputs 0-d."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import onnx_export


def test_a_0d_input_gives_a_0d_bfloat16_output() -> None:
    pytest.importorskip("ml_dtypes")

    class ToBfloat16(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * 2).bfloat16()

    x = torch.tensor(1.5)
    program = onnx_export.dynamo_export(ToBfloat16(), x)
    got = program(x)
    assert got.shape == () and got.dtype == torch.bfloat16
    assert float(got) == float(ToBfloat16()(x))
    as_numpy = program(np.array(1.5, np.float32))
    assert as_numpy.shape == ()
