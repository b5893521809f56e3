"""Top-k ties: ONNX's ``TopK`` gives the lowest index among equal values; torch does not say.

torch's CPU ``topk`` returns equal values in whatever order its algorithm happens to give
(of four equal scores, indices 2 and 3), so an export whose indices differ from eager's
only where the values tie is as right as eager: the order among equals is unspecified.
The parity check then runs eager once more with ties broken by the lowest index, and
when that matches, says so instead of blaming the graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["TIES_CAUSE", "has_topk", "lowest_index_topk"]

TIES_CAUSE = (
    "the outputs differ only where top-k values tie: ONNX's TopK returns the lowest index "
    "among equal values, torch's topk leaves their order unspecified, and eager with ties "
    "broken by the lowest index matches the file. Both answers are right; if the order of "
    "ties matters to you, break them in the model (e.g. add a tiny index-dependent term)."
)


def has_topk(program: torch.export.ExportedProgram) -> bool:
    """Whether the captured graph calls ``aten.topk`` (in any subgraph)."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            if node.op == "call_function" and "topk" in str(node.target):
                return True
    return False


@contextlib.contextmanager
def lowest_index_topk() -> Iterator[None]:
    """While active, ``torch.topk`` and ``Tensor.topk`` break ties by the lowest index."""
    original, method = torch.topk, torch.Tensor.topk

    def topk(
        x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
    ) -> Any:
        values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
        return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))

    torch.topk, torch.Tensor.topk = topk, topk  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.topk, torch.Tensor.topk = original, method  # type: ignore[method-assign]
