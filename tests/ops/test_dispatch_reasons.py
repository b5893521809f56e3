"""Dispatch says what it did: a failed type promotion is named in the decision's reason."""

from __future__ import annotations

import pytest
import torch

from onnx_export import OnnxRegistry
from onnx_export.translation import _dispatch


class _Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def _add_node() -> torch.fx.Node:
    program = torch.export.export(_Add(), (torch.rand(2), torch.arange(2)))
    return next(n for n in program.graph.nodes if n.op == "call_function")


def test_promotion_casts_are_named_in_the_reason() -> None:
    decision = _dispatch.dispatch(_add_node(), OnnxRegistry())
    assert decision.entry is not None
    assert "inputs promoted as torch does (arg 1 to FLOAT)" in decision.reason


def test_a_failed_promotion_is_named_in_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no common dtype")

    monkeypatch.setattr(_dispatch, "elementwise_dtypes", refuse)
    decision = _dispatch.dispatch(_add_node(), OnnxRegistry())
    assert decision.entry is not None  # still translated, inputs as they are
    assert "type promotion failed (RuntimeError: no common dtype)" in decision.reason
    assert "inputs passed unconverted" in decision.reason
