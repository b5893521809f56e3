"""Half precision where models guard against it: overflow clamps and modules kept in float32.

``if x.dtype == torch.float16 and not torch.isfinite(x).all(): x = torch.clamp(...)``
(BART's encoder layer) is traced as a select; ``_keep_in_fp32_modules`` (T5's ``wo``) stay
float32 in the converted copy. Each graph runs in ONNX Runtime against eager PyTorch.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import onnx_ir as ir
import pytest
import torch
from torch import nn

import onnx_export
from onnx_export.capture._half import in_half_precision, kept_float32_names, kept_in_float32

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class OverflowGuard(nn.Module):
    """BART's encoder layer's last lines."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden_states = x + 1
        if hidden_states.dtype == torch.float16 and not torch.isfinite(hidden_states).all():
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return hidden_states - 1


class RaisesOnOverflow(nn.Module):
    """An ``isfinite`` test that does not clamp: left to fail as a data-dependent branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if not torch.isfinite(y).all():
            raise ValueError("overflow")
        return y


def _half_export(model: nn.Module, *args: torch.Tensor) -> onnx_export.ONNXProgram:
    options = onnx_export.ExportOptions(dtype="float16")
    return onnx_export.dynamo_export(model.eval(), *args, export_options=options)


def test_overflow_clamp_is_traced_as_a_select_and_matches_eager() -> None:
    # 64600 is finite and above the clamp (64512): left alone unless a value is infinite.
    # (Infinite inputs, not an overflow inside the graph: ORT's CPU provider computes some
    # float16 ops in float32, where 30000 * 3 does not overflow.)
    finite = torch.tensor([[1.0, -2.0, 30000.0, 64600.0]]).half()
    infinite = torch.tensor([[1.0, float("inf"), 30000.0, -float("inf")]]).half()
    program = _half_export(OverflowGuard(), finite)
    ops = {node.op_type for node in program.model.graph}
    assert {"Where", "Clip"} <= ops, ops
    for x in (finite, infinite):
        want = OverflowGuard()(x)
        got = np.asarray(program(x.numpy()))
        np.testing.assert_array_equal(got, want.numpy())
    assert np.asarray(program(finite.numpy()))[0, 3] == 64608.0  # not clamped
    assert np.asarray(program(infinite.numpy()))[0, 1] == 64512.0  # clamped


def test_isfinite_test_without_a_clamp_still_fails_capture() -> None:
    with pytest.raises(onnx_export.OnnxExportError, match="isfinite"):
        _half_export(RaisesOnOverflow(), torch.ones(2, 3))


class KeepsOutputInFloat32(nn.Module):
    """T5's feed-forward shape: ``wo`` declared float32, as T5 declares it."""

    _keep_in_fp32_modules: ClassVar[list[str]] = ["wo"]

    def __init__(self) -> None:
        super().__init__()
        self.wi, self.wo, self.norm = nn.Linear(8, 16), nn.Linear(16, 8), nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.wo(torch.relu(self.wi(x))).to(x.dtype))


class Wrapper(nn.Module):
    """A task wrapper around a model that declares the modules (as ``hf``'s graphs are)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = KeepsOutputInFloat32()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


@pytest.mark.parametrize(
    ("dtype", "kept"), [("float16", ("wo",)), ("bfloat16", ())], ids=["float16", "bfloat16"]
)
def test_keep_in_fp32_modules_apply_in_float16_only(dtype: str, kept: tuple[str, ...]) -> None:
    assert kept_in_float32(Wrapper(), dtype) == kept


def test_keep_in_fp32_modules_strict_apply_in_both_half_dtypes() -> None:
    class Strict(Wrapper):
        _keep_in_fp32_modules_strict: ClassVar[list[str]] = ["norm"]

    assert kept_in_float32(Strict(), "bfloat16") == ("norm",)
    assert kept_in_float32(Strict(), "float16") == ("norm", "wo")
    assert kept_float32_names(Strict(), "bfloat16") == {"model.norm.weight", "model.norm.bias"}


def test_kept_module_stays_float32_in_the_graph_and_matches_eager() -> None:
    torch.manual_seed(0)
    model = Wrapper().eval()
    x = torch.randn(2, 3, 8)
    program = _half_export(model, x)
    initializers = {v.name: v.dtype for v in program.model.graph.initializers.values()}
    wo = [n for n in initializers if ".wo." in n]
    wi = [n for n in initializers if ".wi." in n]
    assert wo and all(initializers[n] == ir.DataType.FLOAT for n in wo), initializers
    assert wi and all(initializers[n] == ir.DataType.FLOAT16 for n in wi), initializers
    assert model.model.wo.weight.dtype == torch.float32  # the user's model is left as it was
    reference = in_half_precision(model, "float16")
    assert reference.model.wo.weight.dtype == torch.float32
    assert torch.equal(reference.model.wo.weight, model.model.wo.weight)  # copied, exact
    with torch.no_grad():
        want = reference(x.half())
    got = np.asarray(program(x.half().numpy()))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.float().numpy(), rtol=1e-2, atol=1e-2)


def test_kept_module_casts_half_inputs_it_would_refuse() -> None:
    """A kept module whose model does not cast for it gets float32 inputs from its hook."""

    class NoCast(KeepsOutputInFloat32):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.wo(torch.relu(self.wi(x)))  # float16 into the float32 wo

    torch.manual_seed(0)
    model, x = NoCast().eval(), torch.randn(2, 8)
    program = _half_export(model, x)
    with torch.no_grad():
        want = in_half_precision(model, "float16")(x.half())
    assert want.dtype == torch.float32
    got = np.asarray(program(x.half().numpy()))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-2, atol=1e-2)
