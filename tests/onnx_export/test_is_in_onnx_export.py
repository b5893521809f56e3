"""``torch.onnx.is_in_onnx_export()`` is True while the model is captured, and only then.

Models take an export path on it (``x.sin() if torch.onnx.is_in_onnx_export() else
x.cos()``): the ONNX graph has that path, with either capture strategy. Before and after
the export (a failed one too) and in other threads it is torch's own answer.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.onnx
from torch import nn

import onnx_export
from onnx_export.capture._onnx_flag import onnx_export_flag
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class ExportBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def pick(x: torch.Tensor) -> torch.Tensor:
            return x.sin() if torch.onnx.is_in_onnx_export() else x.cos()

        return pick(x)


class Sin(nn.Module):  # what ExportBranch computes while exported
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin()


@pytest.mark.parametrize("strategy", ["non_strict", "strict"])
def test_the_model_takes_its_export_branch(strategy: str) -> None:
    original = torch.onnx.is_in_onnx_export
    assert not torch.onnx.is_in_onnx_export()
    options = onnx_export.ExportOptions(capture_strategies=(strategy,))  # type: ignore[arg-type]
    program = onnx_export.dynamo_export(ExportBranch(), torch.randn(3, 4), export_options=options)
    assert torch.onnx.is_in_onnx_export is original and not torch.onnx.is_in_onnx_export()
    ops = [n.op_type for n in program.model.graph]
    assert "Sin" in ops and "Cos" not in ops
    x = torch.randn(3, 4)
    assert_onnx_program_close(program, Sin(), x)
    with onnx_export_flag():  # eager PyTorch on the branch the export took
        expected = ExportBranch()(x)
    torch.testing.assert_close(program(x), expected)


def test_the_flag_is_false_again_after_a_failed_export() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert torch.onnx.is_in_onnx_export()
            raise ValueError("the model refuses")

    with pytest.raises(onnx_export.CaptureError, match="the model refuses"):
        onnx_export.dynamo_export(Fails(), torch.randn(2))
    assert not torch.onnx.is_in_onnx_export()


def test_other_threads_do_not_see_the_flag() -> None:
    seen: list[bool] = []

    class AsksAnotherThread(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            reader = threading.Thread(target=lambda: seen.append(torch.onnx.is_in_onnx_export()))
            reader.start()
            reader.join()
            return x * 2 if torch.onnx.is_in_onnx_export() else x

    options = onnx_export.ExportOptions(capture_strategies=("non_strict",))
    model, x = AsksAnotherThread(), torch.randn(3)
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert seen and not any(seen)  # the capturing thread saw True: the graph doubles x
    torch.testing.assert_close(program(x), x * 2)
    with onnx_export_flag():
        torch.testing.assert_close(program(x), model(x))
