"""``ONNXProgram.verify`` for every dtype a program returns, and its input checks.

Narrow floats (float16, bfloat16, float8) are compared in float32 with tolerances of their
dtype, complex outputs as real views, integers and bools exactly. Inputs are checked by the
adapter before anything runs, with the same typed errors as a call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import onnx_export
from onnx_export.adapters import (
    ConstantMismatchError,
    InputDtypeError,
    InputShapeError,
    InputStructureError,
    MissingKernelError,
)
from onnx_export.program import _program
from onnx_export.program._verify import compare, dtype_tolerances
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return self.linear(x) * scale


class ManyDtypes(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x > 0,
            (x * 10).to(torch.int32),
            torch.complex(x, 2 * x),
            x.to(torch.float8_e4m3fn),
            x.to(torch.float16),
        )


@pytest.fixture(scope="module")
def many_dtypes() -> onnx_export.ONNXProgram:
    return onnx_export.dynamo_export(ManyDtypes(), torch.randn(2, 3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_narrow_float_models_verify(dtype: torch.dtype) -> None:
    model = Scaled().to(dtype)
    x = torch.randn(2, 4, dtype=dtype)
    program = onnx_export.dynamo_export(model, x, 2.0)
    result = program.verify(x, 2.0)
    assert result.ok, result
    (output,) = result.outputs
    eps = torch.finfo(dtype).eps
    assert output.dtype == str(dtype).removeprefix("torch.")
    assert (output.rtol, output.atol) == (2 * eps, eps)
    if dtype is torch.bfloat16:  # ONNX Runtime's CPU provider has no bfloat16 Gemm
        assert "upcast=['bfloat16']" in result.note
    else:
        assert result.note == ""
        assert_onnx_program_close(program, model, x, 2.0, rtol=2e-3, atol=1e-3)


def test_every_output_dtype_is_compared(many_dtypes: onnx_export.ONNXProgram) -> None:
    x = torch.randn(2, 3)
    assert_onnx_program_close(many_dtypes, ManyDtypes(), x, rtol=0, atol=0)
    result = many_dtypes.verify(x)
    assert result.ok, result
    dtypes = [o.dtype for o in result.outputs]
    assert dtypes == ["bool", "int32", "complex64", "float8_e4m3fn", "float16"]
    exact = [(o.rtol, o.atol) for o in result.outputs[:2]]
    assert exact == [(0.0, 0.0), (0.0, 0.0)]


def test_bfloat16_export_verifies_and_runs_upcast_on_cpu(tmp_path: Path) -> None:
    model = Scaled().to(torch.bfloat16)
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    options = onnx_export.ExportOptions(verify=True)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    with pytest.raises(MissingKernelError, match=r"no bfloat16 kernel for Gemm.*upcast="):
        program(x)
    module = onnx_export.load(program.save(tmp_path / "bf16.onnx"), upcast=["bfloat16"])
    got = module(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got, model(x), rtol=2 * 2**-7, atol=2**-7)


@pytest.fixture(scope="module")
def scaled() -> onnx_export.ONNXProgram:
    return onnx_export.dynamo_export(Scaled(), torch.randn(2, 4), 2.0)


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((torch.randn(3, 4), 2.0), InputShapeError, "expected size 2 at axis 0"),
        ((torch.randn(2, 4), 3.0), ConstantMismatchError, "expected the constant 2.0"),
        ((torch.randn(2, 4, dtype=torch.float64), 2.0), InputDtypeError, "float64"),
        (({"x": torch.randn(2, 4)}, 2.0), InputStructureError, "x"),
    ],
    ids=["static-size", "constant", "dtype", "structure"],
)
def test_verify_checks_inputs_before_running(
    scaled: onnx_export.ONNXProgram,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[Any, ...],
    error: type[Exception],
    words: str,
) -> None:
    def must_not_run(*_: Any) -> None:
        raise AssertionError("the model ran before the inputs were checked")

    monkeypatch.setattr(_program, "run_eager", must_not_run)
    with pytest.raises(error, match=words) as verify_error:
        scaled.verify(*args)
    with pytest.raises(error) as call_error:
        scaled(*args)
    assert str(verify_error.value) == str(call_error.value)


def test_integer_outputs_compare_exactly() -> None:
    (off_by_one,) = compare(["i"], [np.array([1, 2])], [np.array([1, 3])], 1.0, 1.0)
    assert not off_by_one.ok and off_by_one.max_abs_error == 1.0
    (same,) = compare(["b"], [torch.tensor([True, False])], [np.array([True, False])], 0, 0)
    assert same.ok


def test_float_comparison_handles_nan_inf_and_shapes() -> None:
    nan_inf = torch.tensor([float("nan"), float("inf"), 1.0])
    (equal,) = compare(["y"], [nan_inf], [nan_inf.numpy()], 1e-4, 1e-5)
    assert equal.ok
    (other_shape,) = compare(["y"], [torch.zeros(2)], [np.zeros(3, np.float32)], 1e-4, 1e-5)
    assert not other_shape.ok


def test_bfloat16_tolerance_allows_one_ulp_not_two_percent() -> None:
    want = torch.tensor([1.0, 2.0, 100.0], dtype=torch.bfloat16)
    ulp = torch.tensor([1.0078125, 2.015625, 100.5], dtype=torch.bfloat16)
    (close,) = compare(["y"], [want], [ulp], 1e-4, 1e-5)
    assert close.ok
    (far,) = compare(["y"], [want], [want * 1.05], 1e-4, 1e-5)
    assert not far.ok


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("float32", (1e-4, 1e-5)),
        ("complex64", (1e-4, 1e-5)),
        ("float16", (2 * 2**-10, 2**-10)),
        ("bfloat16", (2 * 2**-7, 2**-7)),
        ("float8_e5m2", (0.5, 0.25)),
        ("int64", (0.0, 0.0)),
        ("bool", (0.0, 0.0)),
    ],
)
def test_tolerances_follow_the_dtype(dtype: str, expected: tuple[float, float]) -> None:
    assert dtype_tolerances(dtype, 1e-4, 1e-5) == expected


class PairsRows(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 2, x.shape[1]).sum(1)  # the batch must be even


def test_broken_export_condition_is_an_input_shape_error() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(PairsRows(), torch.randn(4, 3), export_options=options)
    assert program.verify(torch.randn(6, 3)).ok
    # Captured with deferred runtime asserts, the condition is the model's own reshape.
    with pytest.raises(InputShapeError, match=r"got shapes that break it \(RuntimeError: shape"):
        program.verify(torch.randn(5, 3))
