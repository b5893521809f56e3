"""Type promotion as torch does it, before translation: mixed dtypes in one op.

ONNX ops take one dtype; torch promotes (``cat`` of int64 and an empty float32 tensor is
float32, ``int64 < float32`` compares in float32, ``where(c, int, 2.5)`` is float32).
Each model is exported, run in ONNX Runtime and compared with eager (dtype included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

from tests.helpers import export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> Any:
        return self.fn(a, b)


def _i64() -> torch.Tensor:
    return torch.tensor([[3, -1, 4], [1, -5, 9]])


def _f32() -> torch.Tensor:
    return torch.tensor([[0.5, -1.0, 4.25], [2.0, -5.5, 7.0]])


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, torch.Tensor]]]] = {
    "cat_int_and_empty_float": (
        lambda a, b: torch.cat([a, b]),
        lambda: (torch.arange(3), torch.zeros(0)),
    ),
    "cat_empty_float_first": (
        lambda a, b: torch.cat([b, a]),
        lambda: (torch.arange(4), torch.zeros(0)),
    ),
    "cat_int32_float64": (
        lambda a, b: torch.cat([a, b], dim=1),
        lambda: (_i64().to(torch.int32), _f32().double()),
    ),
    "cat_bool_int": (lambda a, b: torch.cat([a > 0, b]), lambda: (_i64(), _i64())),
    "cat_half_float": (
        lambda a, b: torch.cat([a.half(), b]),
        lambda: (_f32(), _f32()),
    ),
    "stack_int_float": (lambda a, b: torch.stack([a, b], dim=-1), lambda: (_i64(), _f32())),
    "hstack_int_float": (lambda a, b: torch.hstack([a, b]), lambda: (_i64(), _f32())),
    "vstack_bool_float": (lambda a, b: torch.vstack([a > 0, b]), lambda: (_i64(), _f32())),
    "where_int_float": (lambda a, b: torch.where(a > 0, a, b), lambda: (_i64(), _f32())),
    "where_int_scalar": (lambda a, b: torch.where(a > 0, a, 2.5) + b, lambda: (_i64(), _f32())),
    "add_int_float": (lambda a, b: a + b, lambda: (_i64(), _f32())),
    "mul_bool_int": (lambda a, b: (a > 0) * b, lambda: (_i64(), _i64())),
    "sub_int_float_scalar": (lambda a, b: (a - 1.5, b - 2), lambda: (_i64(), _i64())),
    "div_int_int": (lambda a, b: a / (b.abs() + 1), lambda: (_i64(), _i64())),
    "maximum_int_float": (torch.maximum, lambda: (_i64(), _f32())),
    "remainder_int_float": (torch.remainder, lambda: (_i64(), _f32() + 10.0)),
    "less_int_float": (lambda a, b: a < b, lambda: (_i64(), _f32())),
    "eq_int_float_scalar": (lambda a, b: (a == 4.0, b == 3), lambda: (_i64(), _i64())),
    "pow_int_float": (lambda a, b: torch.pow(a, b.abs()), lambda: (_i64(), _f32())),
    "float64_plus_float32": (lambda a, b: a.double() + b, lambda: (_f32(), _f32())),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mixed_dtypes_promote_as_torch(name: str) -> None:
    fn, inputs = CASES[name]
    args = inputs()
    program = export_and_check(Fn(fn), *args)
    expected = pytree.tree_leaves(Fn(fn)(*args))
    got = pytree.tree_leaves(program(*args))
    assert [str(g.dtype) for g in got] == [str(e.dtype) for e in expected]  # torch's promotion
