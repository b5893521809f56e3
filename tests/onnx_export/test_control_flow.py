"""Higher-order ops as ONNX control flow: ``while_loop`` -> ``Loop``, ``scan``/``map`` ->
``Scan``, ``cond`` -> ``If`` (several outputs, nested, weights in branches),
``invoke_subgraph`` -> inlined; each run in ONNX Runtime against eager, static and with
dynamic shapes at two sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch._higher_order_ops.map import map as torch_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class CountedLoop(nn.Module):
    """A tensor counter and a tensor carried through ``while_loop``."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            return i < 3

        def body_fn(i: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, acc * 2 + i

        i, acc = while_loop(cond_fn, body_fn, (torch.tensor(0), x))
        return i, acc


class IntCarryLoop(nn.Module):
    """An int carry bounded by a (dynamic) dim, and a buffer used in the body.

    (A parameter that requires grad makes torch.export refuse int carries.)
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def cond_fn(i: int, acc: torch.Tensor) -> Any:
            return i < acc.shape[0]

        def body_fn(i: int, acc: torch.Tensor) -> tuple[Any, torch.Tensor]:
            return i + 1, acc.cos() * self.weight

        return while_loop(cond_fn, body_fn, (0, x))[1]  # type: ignore[no-any-return]


class NestedLoops(nn.Module):
    """A ``while_loop`` whose body runs another ``while_loop``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def inner(acc: torch.Tensor) -> torch.Tensor:
            out = while_loop(
                lambda j, a: j < 3, lambda j, a: (j + 1, a + j * 0.5), (torch.tensor(0), acc)
            )
            return out[1]  # type: ignore[no-any-return]

        result = while_loop(
            lambda i, a: i < 2, lambda i, a: (i + 1, inner(a) * 1.5), (torch.tensor(0), x)
        )
        return result[1]  # type: ignore[no-any-return]


class RunningSum(nn.Module):
    """``scan`` with a carry, a stacked output and a weight, also reversed."""

    def __init__(self, reverse: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))
        self.reverse = reverse

    def forward(self, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def step(carry: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            carry = carry * self.weight + x
            return carry, carry.sum() + x

        return scan(step, torch.zeros_like(xs[0]), xs, reverse=self.reverse)  # type: ignore[no-any-return]


class MapRows(nn.Module):
    """``torch._higher_order_ops.map`` over the first axis, with an extra operand."""

    def forward(self, xs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch_map(lambda x, y: (x * y).sin(), xs, y)  # type: ignore[no-any-return]


class ThreeOutputs(nn.Module):
    """``cond`` with three outputs of different dtypes."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        def yes(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return t + 1, t.sum(0), (t > 0).to(torch.int64)

        def no(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return t - 1, t.amax(0), (t < 0).to(torch.int64)

        return torch.cond(x.mean() > 0, yes, no, (x,))  # type: ignore[no-any-return]


class NestedCond(nn.Module):
    """``cond`` inside a branch of ``cond``, with weights used in both levels."""

    def __init__(self) -> None:
        super().__init__()
        self.outer = nn.Linear(4, 4)
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def inner_yes(t: torch.Tensor) -> torch.Tensor:
            return self.inner(t).relu()

        def inner_no(t: torch.Tensor) -> torch.Tensor:
            return self.inner(t) * -1

        def yes(t: torch.Tensor) -> torch.Tensor:
            return torch.cond(t[:, 0].sum() > 0, inner_yes, inner_no, (self.outer(t),))

        def no(t: torch.Tensor) -> torch.Tensor:
            return self.outer(t).tanh()

        return torch.cond(x.sum() > 0, yes, no, (x,))  # type: ignore[no-any-return]


class CondInLoopAndScan(nn.Module):
    """``cond`` inside a ``while_loop`` body (with a weight) and inside a ``scan`` body."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def body(i: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a = torch.cond(a.sum() > 0, self.linear, lambda t: t * -0.5, (a,))
            return i + 1, a

        _, y = while_loop(lambda i, a: i < 3, body, (torch.tensor(0), x))

        def step(c: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            c = torch.cond(row.sum() > 0, lambda u, v: u + v, lambda u, v: u - v, (c, row))
            return c, c * 2

        return scan(step, torch.zeros_like(y[0]), y)  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    @torch.compiler.nested_compile_region
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + 0.5


class RepeatedBlocks(nn.Module):
    """Three calls of one ``nested_compile_region``: strict capture keeps ``invoke_subgraph``."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


@dataclasses.dataclass(frozen=True)
class Case:
    model: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[torch.Tensor, ...]]  # inputs at a given dynamic size
    dynamic: dict[str, Any]
    onnx_op: str
    strict: bool = False


CASES = {
    "while_loop": Case(CountedLoop, lambda n: (torch.randn(n, 4),), {"x": {0: "n"}}, "Loop"),
    "while_loop_int_carry": Case(
        IntCarryLoop, lambda n: (torch.randn(n, 4),), {"x": {0: "n"}}, "Loop"
    ),
    "while_loop_nested": Case(NestedLoops, lambda n: (torch.randn(n, 3),), {"x": {0: "n"}}, "Loop"),
    "scan": Case(RunningSum, lambda n: (torch.randn(n, 4),), {"xs": {0: "steps"}}, "Scan"),
    "scan_reverse": Case(
        lambda: RunningSum(reverse=True), lambda n: (torch.randn(n, 4),), {"xs": {0: "t"}}, "Scan"
    ),
    "map": Case(
        MapRows,
        lambda n: (torch.randn(n, 3), torch.randn(3)),
        {"xs": {0: "n"}, "y": None},
        "Scan",
    ),
    "cond_three_outputs": Case(ThreeOutputs, lambda n: (torch.randn(n, 4),), {"x": {0: "n"}}, "If"),
    "cond_nested_weights": Case(NestedCond, lambda n: (torch.randn(n, 4),), {"x": {0: "n"}}, "If"),
    "cond_in_loop_and_scan": Case(
        CondInLoopAndScan, lambda n: (torch.randn(n, 4),), {"x": {0: "n"}}, "Loop"
    ),
    "invoke_subgraph": Case(
        RepeatedBlocks, lambda n: (torch.randn(n, 4),), {"x": {0: "batch"}}, "Gemm", strict=True
    ),
}


def _options(case: Case, dynamic: bool) -> onnx_export.ExportOptions:
    return onnx_export.ExportOptions(
        dynamic_shapes=case.dynamic if dynamic else None,
        capture_strategies=("strict",) if case.strict else ("non_strict", "strict"),
    )


def _op_types(graph: Any) -> set[str]:
    found = set()
    for node in graph:
        found.add(node.op_type)
        for attr in node.attributes.values():
            if attr.type == onnx_export_ir_graph_type():
                found |= _op_types(attr.value)
    return found


def onnx_export_ir_graph_type() -> Any:
    import onnx_ir as ir

    return ir.AttributeType.GRAPH


@pytest.mark.parametrize("name", list(CASES))
def test_static(name: str) -> None:
    torch.manual_seed(0)
    case = CASES[name]
    model = case.model().eval()
    program = export_and_check(model, *case.inputs(3), options=_options(case, dynamic=False))
    assert case.onnx_op in _op_types(program.model.graph)


@pytest.mark.parametrize("name", list(CASES))
def test_dynamic_at_two_sizes(name: str) -> None:
    torch.manual_seed(0)
    case = CASES[name]
    model = case.model().eval()
    program = export_and_check(model, *case.inputs(3), options=_options(case, dynamic=True))
    assert case.onnx_op in _op_types(program.model.graph)
    assert_onnx_program_close(program, model, *case.inputs(6))


def test_cond_takes_each_branch() -> None:
    torch.manual_seed(0)
    model = NestedCond().eval()
    x = torch.randn(2, 4)
    program = export_and_check(model, x, options=onnx_export.ExportOptions())
    for sign in (1.0, -1.0):
        for inner in (1.0, -1.0):
            probe = (torch.rand(2, 4) + 0.1) * sign
            probe[:, 0] *= inner
            assert_onnx_program_close(program, model, probe)


def test_invoke_subgraph_is_inlined_at_each_call() -> None:
    program = export_and_check(
        RepeatedBlocks().eval(),
        torch.randn(2, 4),
        options=onnx_export.ExportOptions(capture_strategies=("strict",), optimize=False),
    )
    assert not program.model.functions
    weights = [name for name in program.model.graph.initializers if name.startswith("blocks.")]
    assert len(weights) == 6  # each block's own weight and bias, used by its own call


def test_dynamic_export_right_after_a_static_one_stays_dynamic() -> None:
    """torch.compile's cache of a loop body from the static export is not reused."""
    case = CASES["map"]
    export_and_check(MapRows(), *case.inputs(3), options=_options(case, dynamic=False))
    model = MapRows()
    program = export_and_check(model, *case.inputs(3), options=_options(case, dynamic=True))
    assert_onnx_program_close(program, model, *case.inputs(6))
