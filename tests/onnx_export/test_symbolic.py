"""SymInt/SymFloat/SymBool arithmetic left in the graph by dynamic shapes, as ONNX scalar
ops: each model forces its ops into the graph, is exported with dynamic dims and run in
ONNX Runtime at two sizes against eager.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        return self.fn(x, y)


def _max_min(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n, m = x.shape[0], y.shape[0]
    return x.new_zeros(torch.sym_max(n, m), torch.sym_min(n, m)) + 1


def _floordiv_mod(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x.new_ones(n // 3 + 1, n % 3 + 1, (n - 10) // 4 + 5, (n - 10) % 4 + 1)


def _rounding(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x.new_ones(math.ceil(n / 3), math.floor(n / 4) + 1, math.trunc(n / 2.5))


def _float_int(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    root = torch.sym_int(torch._sym_sqrt(n))  # type: ignore[attr-defined]  # untyped in torch
    return x.new_ones(torch.sym_int(torch.sym_float(n) * 1.5), root + 1)


def _ite_not_compare(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n, m = x.shape[0], y.shape[0]
    bigger = torch.sym_ite(n > m, n, m)
    smaller = torch.sym_ite(torch.sym_not(n >= m), n, m)
    same = torch.sym_ite((n == m) | (n != m) & (n <= m) & (n < m + 100), 1, 2)
    return x.new_ones(bigger, smaller, same)


def _sum_pow_neg(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n, m = x.shape[0], y.shape[0]
    negated = -n
    return x.new_ones(torch.sym_sum([n, m, 2]), n**2, -negated - 1)


def _numel_size(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return y.new_zeros(x.numel(), x.size(-2)) + y.sum()


def _scalar_times_tensor(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    ints = torch.arange(4) * n + n  # an int tensor with a SymInt
    return x * n + y.sum() / m_float(y) + ints.sum() + (x > n).sum()


def m_float(y: torch.Tensor) -> Any:
    return torch.sym_float(y.shape[0]) * 0.5


CASES: dict[str, tuple[Callable[..., Any], set[Any]]] = {
    "sym_max_min": (_max_min, {torch.sym_max, torch.sym_min}),
    "floordiv_mod": (_floordiv_mod, {operator.floordiv, operator.mod}),
    "ceil_floor_trunc": (_rounding, {math.ceil, math.floor, math.trunc, operator.truediv}),
    # torch.sym_int of a float is recorded as math.trunc
    "sym_float_int_sqrt": (_float_int, {torch.sym_float, torch._sym_sqrt, math.trunc}),  # type: ignore[attr-defined]
    "sym_ite_not_compare": (
        _ite_not_compare,
        {torch.sym_ite, torch.sym_not, operator.gt, operator.eq},
    ),
    "sym_sum_pow_neg": (_sum_pow_neg, {torch.sym_sum, operator.pow, operator.neg}),
    "numel_size": (_numel_size, {torch.ops.aten.sym_numel.default, torch.ops.aten.sym_size.int}),
    "scalar_times_tensor": (_scalar_times_tensor, {operator.mul}),
}

_DYNAMIC = {"x": {0: "n"}, "y": {0: "m"}}


def _inputs(n: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3), torch.randn(m, 2)


def _targets(program: onnx_export.ONNXProgram) -> set[Any]:
    return {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_ops_at_two_sizes(name: str) -> None:
    fn, expected_targets = CASES[name]
    model = Fn(fn)
    options = onnx_export.ExportOptions(dynamic_shapes=_DYNAMIC)
    program = export_and_check(model, *_inputs(7, 5), options=options)
    missing = expected_targets - _targets(program)
    assert not missing, f"the graph lacks {missing}: the case does not test them"
    assert_onnx_program_close(program, model, *_inputs(12, 17))
    assert_onnx_program_close(program, model, *_inputs(3, 3))


def _scalar_outputs(x: torch.Tensor, y: torch.Tensor) -> tuple[Any, ...]:
    n, m = x.shape[0], y.shape[0]
    return x + 1, n * 2 + m, n / 2, n > m


def test_symbolic_outputs_come_back_as_0d_tensors() -> None:
    """A SymInt/SymFloat/SymBool output is a graph output; the program returns it as a
    0-d tensor (as torch.onnx's program does), with the value at the new sizes."""
    model = Fn(_scalar_outputs)
    options = onnx_export.ExportOptions(dynamic_shapes=_DYNAMIC)
    program = onnx_export.dynamo_export(model, *_inputs(7, 5), export_options=options)
    for n, m in ((4, 6), (9, 2)):
        x, y = _inputs(n, m)
        plus_one, count, half, bigger = program(x, y)
        torch.testing.assert_close(plus_one, x + 1)
        assert (int(count), float(half), bool(bigger)) == (n * 2 + m, n / 2, n > m)
