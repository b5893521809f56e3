"""The edge probe of the export's own check: the smallest sizes and fully masked rows.

A file right at the example may be wrong or fail at the edges its signature allows. The
export runs them: a mismatch is a ``ParityWarning`` at the model's line of the first
diverging node; ONNX Runtime failing where eager runs is a ``ConversionError`` at export.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import pytest
import torch
from onnxscript import opset18 as op
from torch import nn
from torch.export import Dim

import onnx_export
from onnx_export.errors import ConversionError, ParityWarning
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _export(model: nn.Module, *args: Any, **options: Any) -> onnx_export.ONNXProgram:
    return onnx_export.dynamo_export(
        model, *args, export_options=onnx_export.ExportOptions(**options)
    )


class _Squeezed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(0) * 2  # at batch 1 eager drops the axis; the file keeps it


def test_a_mismatch_at_the_smallest_size_is_a_parity_warning_at_its_line() -> None:
    model = _Squeezed()
    with pytest.warns(ParityWarning, match=r"the smallest sizes \(x\[0\]=1\)") as got:
        program = _export(model, torch.randn(3, 4), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    (found,) = [w for w in got if issubclass(w.category, ParityWarning)]
    assert found.lineno == inspect.getsourcelines(_Squeezed.forward)[1] + 1
    assert_onnx_program_close(program, model, torch.randn(3, 4))
    assert_onnx_program_close(program, model, torch.randn(6, 4))


@torch.library.custom_op("guards_test::third_last", mutates_args=())
def third_last(x: torch.Tensor) -> torch.Tensor:
    """Row ``n - 3`` of ``x``, counted cyclically (row 0 of a single row)."""
    return x[(-3) % x.shape[0]].clone()


@third_last.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[1:])


def _third_last_onnx(x: Any) -> Any:
    """Right for 2 rows or more; at 1 row the index -2 is out of bounds in ONNX Runtime."""
    rows = op.Shape(x, start=0, end=1)
    index = op.Squeeze(op.Sub(rows, op.Constant(value_ints=[3])))
    return op.Gather(x, index, axis=0)


class _ThirdLast(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return third_last(x) + 1


def test_onnx_runtime_failing_at_the_smallest_size_is_an_export_error() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op("guards_test::third_last", _third_last_onnx)
    model = _ThirdLast()
    with pytest.raises(ConversionError, match=r"fails in ONNX Runtime at the smallest sizes") as e:
        _export(model, torch.randn(4, 3), dynamic_shapes={"x": {0: "n"}}, onnx_registry=registry)
    # ONNX Runtime's words, then the export's next steps: not the advice the adapter gives a
    # saved file's caller (re-export it), cut short mid-sentence
    message = str(e.value)
    assert "out of bounds" in message or "indices element out of data bounds" in message
    assert "Re-export it with this version" not in message
    assert "Next steps: export with those sizes in the example" in message
    # The same file bounded to 2 rows or more: the probe starts at 2, and it exports.
    program = _export(
        model,
        torch.randn(4, 3),
        dynamic_shapes={"x": {0: Dim("n", min=2)}},
        onnx_registry=registry,
    )
    for rows in (2, 4, 7):
        assert_onnx_program_close(program, model, torch.randn(rows, 3))


class _NanToNum(nn.Module):
    """Masked attention weights with NaN made 0, as torch's safe softmax gives."""

    def forward(self, scores: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        hidden = scores.masked_fill(~attn_mask, float("-inf")).softmax(-1)
        return torch.nan_to_num(hidden) @ scores


def _identity(x: Any, nan: Any = None, posinf: Any = None, neginf: Any = None) -> Any:
    """A wrong ``nan_to_num`` for the test: right wherever no NaN comes."""
    return op.Identity(x)


def test_a_fully_masked_row_that_differs_is_a_parity_warning() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op(torch.ops.aten.nan_to_num.default, _identity)
    scores = torch.randn(2, 4, 4)
    mask = torch.ones(2, 4, 4, dtype=torch.bool)
    with pytest.warns(ParityWarning, match=r"a fully masked row of attn_mask: NaN"):
        program = _export(_NanToNum(), scores, mask, onnx_registry=registry)
    assert_onnx_program_close(program, _NanToNum(), scores, mask)  # the example agrees


class _SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, key_padding_mask=key_padding_mask)[0]


def test_a_right_file_draws_no_warning_from_the_probe() -> None:
    model = _SelfAttention().eval()
    x = torch.randn(3, 5, 8)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = True
    shapes = {"x": {0: "b", 1: "s"}, "key_padding_mask": {0: "b", 1: "s"}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParityWarning)
        program = _export(model, x, padding, dynamic_shapes=shapes)
    assert "edge probe" in program.stage_times
    padded = padding.clone()
    padded[0] = True  # a fully padded row
    assert_onnx_program_close(program, model, x, padded)
    assert_onnx_program_close(program, model, x[:1, :2], padded[:1, :2])


class _Normed(torch.nn.Module):
    """RMSNorm-like: a keepdim mean (size 1 by design), plus eps, broadcast back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_a_graph_whose_shapes_keep_their_sizes_names_no_lost_size() -> None:
    from onnx_export.program._probe import dropped_size

    model = _Normed()
    x = torch.randn(2, 5, 8)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch", 1: "seq"}})
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert dropped_size(program) == ""
    for size in ((1, 1, 8), (3, 7, 8)):
        y = torch.randn(*size)
        torch.testing.assert_close(program(y), model(y), rtol=1e-4, atol=1e-5)
