"""``aten::gelu`` is one ``Gelu`` node from opset 20 (both approximations), the composite
below; each exported, run in ONNX Runtime and compared with eager.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _op_types(program: onnx_export.ONNXProgram) -> list[str]:
    return [node.op_type for node in program.model.graph]


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "unoptimized"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("opset", [18, 20, 23])
def test_gelu_is_one_gelu_node_from_opset_20(opset: int, approximate: str, optimize: bool) -> None:
    model = nn.GELU(approximate=approximate)
    options = onnx_export.ExportOptions(
        opset_version=opset, optimize=optimize, dynamic_shapes={"input": {0: "batch"}}
    )
    program = export_and_check(model, torch.randn(2, 3, 8), options=options)
    ops = _op_types(program)
    if opset >= 20:
        assert ops == ["Gelu"]
        assert program.model.graph.node(0).attributes["approximate"].as_string() == approximate
    else:  # the composite (the exact one's Erf, the tanh one's Tanh), no Gelu at 18
        assert "Gelu" not in ops
        assert ("Tanh" if approximate == "tanh" else "Erf") in ops
    assert_onnx_program_close(program, model, torch.randn(5, 3, 8))


# bfloat16 runs neither form on ONNX Runtime's CPU (no bfloat16 Pow or Sqrt kernel).
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_gelu_node_keeps_the_input_dtype(dtype: torch.dtype) -> None:
    model = nn.GELU(approximate="tanh")
    x = torch.randn(4, 8).to(dtype)
    options = onnx_export.ExportOptions(opset_version=20)
    program = export_and_check(model, x, options=options, rtol=1e-2, atol=1e-2)
    assert _op_types(program) == ["Gelu"]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_node_under_the_onnxruntime_target(approximate: str) -> None:
    # ONNX Runtime's BiasGelu is the exact GELU: only the exact Gelu is fused into it.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(approximate=approximate)).eval()
    options = onnx_export.ExportOptions(target="onnxruntime")
    program = export_and_check(model, torch.randn(3, 8), options=options)
    ops = _op_types(program)
    assert ("BiasGelu" in ops) == (approximate == "none")
    assert ("Gelu" in ops) == (approximate == "tanh")
