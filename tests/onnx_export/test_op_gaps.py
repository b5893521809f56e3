"""Complex scalars and constants, opset-23 ``Attention``/``RMSNormalization``, ``linspace``:
each exported, run in ONNX Runtime and compared with eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _c(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(x)


# -- complex Python scalars and complex constants ---------------------------------------

COMPLEX = {
    "times_scalar": lambda x: _c(x) * (2 + 3j),
    "divided_by_scalar": lambda x: _c(x) / (1 + 1j),
    "plus_minus_scalars": lambda x: (_c(x) + (1 - 2j)) - (0.5 + 0.5j),
    "scalar_minus": lambda x: (1 + 1j) - _c(x),
    "constant_tensor": lambda x: _c(x) + torch.tensor([1 + 2j, 3 - 1j, 0.5j]),
    "real_times_imaginary": lambda x: x[..., 0] * 2j,
    "full_complex": lambda x: _c(x) * torch.full((3,), 1 + 1j),
    "equals_scalar": lambda x: _c(x) == (1 + 1j),
    "as_real_output": lambda x: torch.view_as_real(_c(x) * (0.5 - 2j)),
    "times_real_scalar": lambda x: torch.view_as_real(_c(x) * 2),
    "plus_real_scalars": lambda x: torch.view_as_real((_c(x) + 1.5) - 3),
    "real_scalar_divided": lambda x: torch.view_as_real(_c(x) / 4.0),
}


@pytest.mark.parametrize("name", list(COMPLEX))
def test_complex_scalars_and_constants(name: str) -> None:
    model = Fn(COMPLEX[name])
    x = torch.randn(3, 2)
    x[1] = torch.tensor([1.0, 1.0])  # one element equal to 1+1j for the comparison
    export_and_check(model, x)


# -- opset 23: Attention and RMSNormalization -------------------------------------------


def _qkv(kv_heads: int = 4) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, 4, 5, 8), torch.randn(2, kv_heads, 7, 8), torch.randn(2, kv_heads, 7, 8)


ATTENTION: dict[str, tuple[dict[str, Any], Callable[[], tuple[Any, ...]]]] = {
    "plain": ({}, _qkv),
    "causal": ({"is_causal": True}, _qkv),
    "scale": ({"scale": 0.3}, _qkv),
    "bool_mask": ({}, lambda: (*_qkv(), torch.rand(5, 7) > 0.3)),
    "float_mask": ({}, lambda: (*_qkv(), torch.randn(2, 1, 5, 7))),
    "grouped_query": ({"enable_gqa": True}, lambda: _qkv(kv_heads=2)),
}


class Attention(nn.Module):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q: Any, k: Any, v: Any, mask: Any = None) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


def _op_types(program: onnx_export.ONNXProgram) -> set[str]:
    return {node.op_type for node in program.model.graph}


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("name", list(ATTENTION))
def test_sdpa_is_onnx_attention_from_opset_23(name: str, opset: int) -> None:
    kwargs, inputs = ATTENTION[name]
    options = onnx_export.ExportOptions(opset_version=opset)
    program = export_and_check(Attention(**kwargs), *inputs(), options=options)
    assert ("Attention" in _op_types(program)) == (opset >= 23)


def test_sdpa_with_dropout_keeps_the_composite_at_opset_23() -> None:
    model = Attention(dropout_p=0.5).eval()
    program = onnx_export.dynamo_export(
        model, *_qkv(), export_options=onnx_export.ExportOptions(opset_version=23)
    )
    assert "Attention" not in _op_types(program)


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("affine", [True, False], ids=["weight", "no_weight"])
def test_rms_norm_is_rms_normalization_from_opset_23(opset: int, affine: bool) -> None:
    torch.manual_seed(0)
    model = nn.RMSNorm(8, elementwise_affine=affine, eps=1e-5)
    if affine:
        nn.init.normal_(model.weight)
    options = onnx_export.ExportOptions(opset_version=opset, dynamic_shapes={"x": {0: "b"}})
    program = export_and_check(model, torch.randn(2, 3, 8), options=options)
    assert ("RMSNormalization" in _op_types(program)) == (opset >= 23)
    assert_onnx_program_close(program, model, torch.randn(5, 3, 8))


# -- linspace ---------------------------------------------------------------------------


def _grid(n: int) -> torch.Tensor:
    return torch.linspace(-4, 4, n)


def _linspaces(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        x + _grid(9),
        torch.linspace(0, 10, 7, dtype=torch.int64),
        torch.linspace(-3.7, 2.9, 6, dtype=torch.int32),
        torch.linspace(x.min(), x.max(), 5),
        torch.linspace(1.5, 1.5, 1),
        torch.linspace(-1, 1, 4, dtype=torch.float64),
    )


class Linspaces(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _linspaces(x)


def test_linspace_with_dynamic_batch() -> None:
    model = Linspaces()
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "n"}})
    program = export_and_check(model, torch.rand(4, 9), options=options)
    assert_onnx_program_close(program, model, torch.rand(11, 9))


@pytest.mark.parametrize("strategy", ["non_strict", "strict"])
def test_failing_op_names_its_own_line_in_a_helper(strategy: str) -> None:
    """The error names the line of the op (inside ``_grid``), not the caller's."""

    def broken(*args: Any) -> Any:
        raise ValueError("broken on purpose")

    registry = onnx_export.OnnxRegistry()
    registry.register_op("aten::linspace", broken)
    options = onnx_export.ExportOptions(onnx_registry=registry, capture_strategies=(strategy,))
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(
            Fn(lambda x: x + _grid(9)), torch.rand(2, 9), export_options=options
        )
    line = _grid.__code__.co_firstlineno + 1
    assert f"test_op_gaps.py:{line}" in str(caught.value)
