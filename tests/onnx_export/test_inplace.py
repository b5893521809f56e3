"""In-place ops on fresh intermediates are rewritten out of place without re-tracing."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class _Residual(nn.Module):
    """``out += identity`` as torchvision's ResNet blocks write it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        out += x
        out.mul_(0.5)
        return torch.relu(out)


class _ViewMutated(nn.Module):
    """A view of the tensor is mutated: only functionalisation gets this right."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        row = y[0]
        row.add_(1.0)
        return y


class _ReadBeforeAndAfter(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        before = y * 3
        y.add_(x)
        return before, y * 2


@pytest.fixture
def no_retrace(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = torch.export.ExportedProgram.run_decompositions

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    return calls


@pytest.mark.parametrize("make", [_Residual, _ReadBeforeAndAfter], ids=["residual", "reads"])
def test_inplace_on_a_fresh_tensor_needs_no_decomposition(
    make: type[nn.Module], no_retrace: list[int]
) -> None:
    torch.manual_seed(0)
    model, x = make().eval(), torch.randn(1, 3, 4, 4)
    program = onnx_export.dynamo_export(model, x)
    assert not no_retrace
    assert_onnx_program_close(program, model, x)


def test_a_mutated_view_is_still_functionalised(no_retrace: list[int]) -> None:
    model, x = _ViewMutated(), torch.randn(3, 4)
    program = onnx_export.dynamo_export(model, x)
    assert no_retrace
    assert_onnx_program_close(program, model, x)


class _ResizedFresh(nn.Module):
    """``resize_`` of a fresh tensor: its out-of-place form has no ONNX function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.resize_(x.numel())
        return y + 1


def test_an_inplace_op_whose_functional_form_has_no_function_is_functionalised() -> None:
    model, x = _ResizedFresh(), torch.randn(3, 4)
    program = onnx_export.dynamo_export(model, x)
    assert_onnx_program_close(program, model, x)


class _ReturnsMutated(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * 2
        h += x
        return h  # the output spec names the in-place node


def test_the_rewritten_program_keeps_a_valid_signature(tmp_path: Any) -> None:
    from onnx_export.capture._inplace import rewrite_fresh_inplace

    model, x = _ReturnsMutated(), torch.randn(3, 4)
    exported = torch.export.export(model, (x,))
    assert rewrite_fresh_inplace(exported, lambda target: True) == 1
    exported.validate()  # every output spec names a node of the graph
    torch.export.save(exported, tmp_path / "program.pt2")
    torch.testing.assert_close(exported.module()(x), model(x))
    assert_onnx_program_close(onnx_export.dynamo_export(model, x), model, x)


class _MessagePassing(nn.Module):
    """torch_geometric's pattern: ``zeros(n).scatter_add_`` degrees, ``index_add_`` messages.

    The int64 index takes no part in type promotion; ``index_add`` has no ONNX function
    but a decomposition of that node alone.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index[0], edge_index[1]
        deg = torch.zeros(x.shape[0]).scatter_add_(0, dst, torch.ones(dst.shape[0]))
        msg = self.lin(x).index_select(0, src) / (deg[dst].unsqueeze(-1) + 1)
        return torch.zeros_like(x).index_add_(0, dst, msg)


def test_index_add_and_scatter_add_on_fresh_tensors_need_no_retrace(
    no_retrace: list[int],
) -> None:
    torch.manual_seed(0)
    model = _MessagePassing().eval()
    x, edges = torch.randn(6, 4), torch.randint(0, 6, (2, 10))
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "n"}, "edge_index": {1: "e"}})
    program = onnx_export.dynamo_export(model, x, edges, export_options=options)
    assert not no_retrace
    assert_onnx_program_close(program, model, x, edges)
    other = (torch.randn(9, 4), torch.randint(0, 9, (2, 17)))
    assert_onnx_program_close(program, model, *other)
