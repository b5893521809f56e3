"""Ops without an ONNX function are decomposed node by node, not by re-tracing (#22).

Each model is exported, run in ONNX Runtime and compared with eager PyTorch; whether
``ExportedProgram.run_decompositions`` (the whole-graph re-trace) ran is counted.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import onnx_export
from onnx_export.diagnostics import DiagnosticOptions, Level


class _Rotated(torch.nn.Module):
    """``rot90`` twice alike (no ONNX function: decomposed), between two convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.rot90(F.gelu(self.a(torch.rot90(x, 1, (2, 3)))), 1, (2, 3))) + x


class _RotatedInCond(torch.nn.Module):
    """``rot90`` inside ``torch.cond``'s branches: a node in a subgraph, decomposed by a
    re-trace of the whole program."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(
            x.sum() > 0,
            lambda t: torch.rot90(t, 1, (2, 3)),
            lambda t: torch.rot90(t, -1, (2, 3)),
            (x,),
        )


class _SameConv(torch.nn.Module):
    """Depthwise ``padding="same"`` convolutions (``aten.conv2d.padding``), twice alike."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(4, 4, 5, groups=4, padding="same")
        self.b = torch.nn.Conv2d(4, 4, 5, groups=4, padding="same")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.gelu(self.a(x))) + x


class _Standardised(torch.nn.Conv2d):
    """Weight standardisation with ``var_mean`` (two outputs) and ``reshape_as``."""

    def __init__(self) -> None:
        super().__init__(3, 6, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var, mean = torch.var_mean(self.weight, dim=[1, 2, 3], keepdim=True, unbiased=False)
        weight = ((self.weight - mean) / torch.sqrt(var + 1e-5)).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, padding=1)


class _Embedded(torch.nn.Module):
    """``diag_embed`` of a transposed (strided) tensor, summed back to its shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diag_embed(x.transpose(1, 2)).sum(-1).transpose(1, 2) * 2


class _PoolTransposed(torch.nn.Module):
    """Swin's head: ``adaptive_avg_pool1d`` of a transposed (strided) tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool1d(x.transpose(1, 2), 1).flatten(1)


@pytest.fixture
def retraces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = torch.export.ExportedProgram.run_decompositions

    def counted(self: torch.export.ExportedProgram, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    return calls


def _export(model: torch.nn.Module, x: torch.Tensor, **options: Any) -> onnx_export.ONNXProgram:
    notes = DiagnosticOptions(verbosity=Level.NOTE)
    program = onnx_export.dynamo_export(
        model, x, export_options=onnx_export.ExportOptions(diagnostic_options=notes, **options)
    )
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
    return program


def _decomposition_note(program: onnx_export.ONNXProgram) -> str:
    notes = [d for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0003"]
    return " ".join(f"{d.message} {d.properties}" for d in notes)


@pytest.mark.parametrize(
    ("model", "op"),
    [
        (_Rotated, "aten.rot90.default"),
        (_Embedded, "aten.diag_embed.default"),
    ],
)
def test_missing_ops_are_decomposed_in_place_without_a_retrace(
    model: type[torch.nn.Module], op: str, retraces: list[int]
) -> None:
    torch.manual_seed(0)
    shape = {_Embedded: (2, 6, 4)}.get(model, (2, 4, 8, 8))
    program = _export(model().eval(), torch.randn(*shape))
    assert retraces == []
    note = _decomposition_note(program)
    assert op in note and "those nodes only" in note


def test_a_missing_op_in_a_subgraph_still_takes_the_full_retrace(retraces: list[int]) -> None:
    torch.manual_seed(0)
    model = _RotatedInCond().eval()
    program = _export(model, torch.randn(2, 4, 3, 3), dynamic_shapes={"x": {0: "batch"}})
    assert retraces == [1]
    for x in (torch.randn(3, 4, 3, 3), -torch.rand(1, 4, 3, 3)):  # each branch, another size
        with torch.no_grad():
            torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
    assert "those nodes only" not in _decomposition_note(program)


class _UpConv3d(torch.nn.Module):
    """MONAI's up path: ``ConvTranspose3d`` (``aten.conv_transpose3d.input``) then a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose3d(4, 2, 3, 2, 1, output_padding=1)
        self.conv = torch.nn.Conv3d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.up(x))


class _GridAnchors(torch.nn.Module):
    """A detector's anchors: ``meshgrid`` of ``arange``s of the feature map's dynamic sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2], x.shape[3]
        yy, xx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        anchors = torch.stack((xx, yy), -1).view(-1, 2)
        return x.flatten(2).transpose(1, 2)[..., :2] + anchors


@pytest.mark.parametrize(
    ("model", "shape", "dynamic", "other"),
    [
        (_UpConv3d, (2, 4, 4, 4, 4), {0: "batch"}, (3, 4, 4, 4, 4)),
        (_GridAnchors, (1, 3, 6, 8), {2: "h", 3: "w"}, (1, 3, 5, 7)),
        (_Standardised, (2, 3, 8, 8), {0: "batch"}, (3, 3, 8, 8)),
        (_SameConv, (2, 4, 8, 8), {0: "batch", 2: "h"}, (3, 4, 5, 8)),
        (_PoolTransposed, (2, 6, 4), {0: "batch", 1: "tokens"}, (3, 5, 4)),
    ],
    ids=[
        "conv_transpose3d",
        "meshgrid",
        "var_mean_reshape_as",
        "conv2d_padding_same",
        "adaptive_avg_pool1d",
    ],
)
def test_ops_models_keep_whole_have_functions_and_no_trace_again(
    model: type[torch.nn.Module],
    shape: tuple[int, ...],
    dynamic: dict[int, str],
    other: tuple[int, ...],
    retraces: list[int],
) -> None:
    """``conv_transpose3d.input``, ``meshgrid.indexing``, ``var_mean.dim``, ``reshape_as``,
    ``conv2d.padding`` and ``adaptive_avg_pool1d`` have ONNX functions (#39): no node is
    traced again (each decomposition cost a trace per node at every export;
    ``padding="same"`` at dynamic shapes, a re-trace of the whole program)."""
    torch.manual_seed(0)
    module = model().eval()
    program = _export(module, torch.randn(*shape), dynamic_shapes={"x": dynamic})
    assert retraces == []
    assert "those nodes only" not in _decomposition_note(program)
    for size in (other, tuple(1 if i in dynamic and i == 0 else d for i, d in enumerate(other))):
        x = torch.randn(*size)
        with torch.no_grad():
            torch.testing.assert_close(program(x), module(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("model", "shape", "dynamic", "other", "op"),
    [
        (_Rotated, (2, 4, 6, 6), {0: "batch"}, (3, 4, 6, 6), "aten.rot90"),
        (_Embedded, (2, 6, 4), {0: "batch", 1: "tokens"}, (3, 5, 4), "aten.diag_embed"),
    ],
    ids=["rot90", "diag_embed"],
)
def test_dynamic_shapes_decompose_those_nodes_only(
    model: type[torch.nn.Module],
    shape: tuple[int, ...],
    dynamic: dict[int, str],
    other: tuple[int, ...],
    op: str,
    retraces: list[int],
) -> None:
    """At symbolic sizes the node is traced on the program's own fake tensors (#39)."""
    torch.manual_seed(0)
    module = model().eval()
    program = _export(module, torch.randn(*shape), dynamic_shapes={"x": dynamic})
    assert retraces == []
    note = _decomposition_note(program)
    assert op in note and "those nodes only" in note
    for size in (other, (1, *other[1:])):  # another size, and a batch of 1
        x = torch.randn(*size)
        with torch.no_grad():
            torch.testing.assert_close(program(x), module(x), rtol=1e-4, atol=1e-5)
