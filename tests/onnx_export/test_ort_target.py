"""``ExportOptions(target="onnxruntime")``: ONNX Runtime's fused ops, same numbers as eager."""

from __future__ import annotations

import copy
import pathlib

import pytest
import torch

import onnx_export
from tests.e2e.zoo_models import ZOO
from tests.helpers import assert_onnx_program_close

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("private_temp_folder")

_ORT = onnx_export.ExportOptions(target="onnxruntime")


def _contrib_ops(program: onnx_export.ONNXProgram) -> set[str]:
    return {n.op_type for n in program.model.graph if n.domain == "com.microsoft"}


@pytest.mark.parametrize(
    ("name", "fused"),
    [
        ("bert", {"Attention", "SkipLayerNormalization", "BiasGelu"}),
        ("gpt2", {"MultiHeadAttention", "SkipLayerNormalization"}),  # Conv1D's Gemm on 3-D
    ],
)
def test_fused_model_matches_eager(name: str, fused: set[str]) -> None:
    entry = ZOO[name]
    model = entry.build()
    args, kwargs = entry.inputs(*entry.size)
    program = onnx_export.dynamo_export(copy.deepcopy(model), *args, export_options=_ORT, **kwargs)
    assert fused <= _contrib_ops(program)
    assert_onnx_program_close(program, model, *args, atol=1e-4, **kwargs)


def test_an_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="target must be 'onnx'"):
        onnx_export.ExportOptions(target="tensorrt")  # type: ignore[arg-type]


def test_the_fusions_keep_weights_replaceable(tmp_path: pathlib.Path) -> None:
    entry = ZOO["bert"]
    args, kwargs = entry.inputs(*entry.size)
    program = onnx_export.dynamo_export(entry.build(), *args, export_options=_ORT, **kwargs)
    other = entry.build()
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    path = program.save(tmp_path / "m.onnx", model_state=other.state_dict())
    loaded = onnx_export.load(path)
    assert_onnx_program_close(loaded, other, *args, atol=1e-4, **kwargs)  # type: ignore[arg-type]
