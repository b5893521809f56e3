"""``torch.float4_e2m1fn_x2`` tensors export as ONNX FLOAT4E2M1 (opset 23 and later).

torch packs two 4-bit values in each element (the first in the low bits); ONNX's shape
counts values, so the last axis doubles (torch ``[1]`` is ONNX ``[2]``), and initializers
hold the same values. An opset left at its default is raised to 23; a chosen opset below
23, which has no op that takes FLOAT4E2M1, is refused with the fix. ONNX Runtime 1.32
has no CPU kernel for FLOAT4E2M1 yet: running such a model fails with an error that says
so, which the tests check too.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnx_ir as ir
import pytest
import torch
from torch import nn

import onnx_export
from onnx_export.adapters import MissingKernelError

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

_OPSET_23 = onnx_export.ExportOptions(opset_version=23)
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # the 8 magnitudes, by their 3 low bits


def _values(packed: torch.Tensor) -> np.ndarray:
    """Eager's float4 values as float32: each byte holds two, the first in the low bits."""
    data = packed.view(torch.uint8).numpy()
    nibbles = np.stack([data & 0x0F, data >> 4], axis=-1).reshape(*data.shape[:-1], -1)
    magnitude = np.asarray(_E2M1, dtype=np.float32)[nibbles & 0x7]
    return np.where(nibbles & 0x8, -magnitude, magnitude)


class Empty(nn.Module):
    def forward(self) -> torch.Tensor:
        return torch.empty([1], dtype=torch.float4_e2m1fn_x2)


class Weights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        codes = torch.tensor([[0x21, 0x7D], [0x00, 0xF8], [0x3B, 0x96]], dtype=torch.uint8)
        self.register_buffer("w", codes.view(torch.float4_e2m1fn_x2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.w, x + 1


@pytest.mark.parametrize("optimize", [False, True])
def test_a_float4_output_is_float4e2m1_with_the_values_counted(optimize: bool) -> None:
    options = onnx_export.ExportOptions(opset_version=23, optimize=optimize)
    program = onnx_export.dynamo_export(Empty(), export_options=options)
    output = program.model.graph.outputs[0]
    assert output.dtype == ir.DataType.FLOAT4E2M1 and list(output.shape) == [2]
    onnx.checker.check_model(program.model_proto, full_check=True)
    with pytest.raises(MissingKernelError, match="ONNX Runtime"):  # ORT 1.32 on CPU
        program()


def test_a_float4_weight_keeps_its_values() -> None:
    model = Weights()
    program = onnx_export.dynamo_export(model, torch.randn(2), export_options=_OPSET_23)
    onnx.checker.check_model(program.model_proto, full_check=True)
    (initializer,) = [
        t
        for t in program.model_proto.graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT4E2M1
    ]
    assert list(initializer.dims) == [3, 4]
    stored = onnx.numpy_helper.to_array(initializer).astype(np.float32)
    np.testing.assert_array_equal(stored, _values(model.w))
    assert [str(d) for d in program.model.graph.outputs[0].shape] == ["3", "4"]


@pytest.mark.parametrize("opset", [18, 20, 22])
def test_a_chosen_opset_below_23_is_refused_with_the_fix(opset: int) -> None:
    options = onnx_export.ExportOptions(opset_version=opset)
    with pytest.raises(onnx_export.ConversionError, match=r"opset_version=23"):
        onnx_export.dynamo_export(Empty(), export_options=options)


def test_the_default_opset_is_raised_to_23_for_float4() -> None:
    program = onnx_export.dynamo_export(Empty())  # as torch.onnx's own test does
    assert program.model.opset_imports[""] == 23
    output = program.model.graph.outputs[0]
    assert output.dtype == ir.DataType.FLOAT4E2M1 and list(output.shape) == [2]
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert onnx_export.dynamo_export(Weights(), torch.randn(2)).model.opset_imports[""] == 23
    plain = onnx_export.dynamo_export(nn.Linear(2, 2), torch.randn(1, 2))
    assert plain.model.opset_imports[""] == 20  # no float4: the default, unchanged


def test_a_fake_float4_weight_takes_its_values_at_save_time(tmp_path: object) -> None:
    with onnx_export.enable_fake_mode():
        fake = Weights()
        program = onnx_export.dynamo_export(fake, torch.randn(2), export_options=_OPSET_23)
    real = Weights()
    path = program.save(tmp_path / "m.onnx", model_state=real.state_dict())  # type: ignore[operator]
    (stored,) = [t for t in onnx.load(path).graph.initializer if t.name == "w"]
    assert list(stored.dims) == [3, 4]
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(stored).astype(np.float32), _values(real.w)
    )
