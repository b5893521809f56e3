"""Bool data through ``Where``/``Min``/``Max`` (no ONNX Runtime kernel) runs as INT32."""

from __future__ import annotations

import torch

from tests.helpers import export_and_check


class BoolData(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mask = (x > 0).masked_fill(x > 1, False)  # Where with bool branches
        return (
            torch.minimum(mask, x < 0.5),
            torch.where(x < -1, mask, ~mask),
            torch.maximum(mask, x < 0),
        )


def test_bool_data_ops_run_and_keep_their_names_and_dtypes() -> None:
    x = torch.randn(3, 4) * 2
    program = export_and_check(BoolData(), x)
    graph = program.model.graph
    assert all(str(v.dtype) == "BOOL" for v in graph.outputs)
    casts = [n for n in graph if n.op_type == "Cast"]
    assert casts, "the bool data went through INT32 casts"
    # every Where/Min/Max of bool data now computes on INT32
    for node in graph:
        if node.op_type in ("Min", "Max", "Where"):
            assert str(node.outputs[0].dtype) == "INT32", node
