"""Property: any call of an exported model either runs and matches eager, or raises ours.

Hypothesis builds calls around a valid one: leaves of other dtypes (bfloat16, float16,
float64, int, bool, complex), ranks and sizes; values that are not tensors (scalars,
``None``, strings, lists); containers with keys missing or added, other lengths, other
types; constants that differ from the recorded ones; arguments by position or name,
unknown keywords. Each call goes to a loaded model (numpy and torch inputs), to the
``ONNXProgram`` and to ``verify``. The outcome must be a result that matches eager
PyTorch, or one of the documented input errors (:class:`onnx_export.adapters.InputError`
and its subclasses, or :class:`~onnx_export.adapters.UnsupportedValueError`), never
anything else (no ``KeyError``, ``AssertionError``, ONNX Runtime error or crash).
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils import _pytree as pytree

import onnx_export
from onnx_export.adapters import InputError, OnnxModule, UnsupportedValueError
from tests.helpers import private_temp_folder  # noqa: F401  # a fixture, used below

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

DOCUMENTED = (InputError, UnsupportedValueError)


class Nested(nn.Module):
    def forward(
        self,
        x: torch.Tensor,
        cache: list[torch.Tensor],
        extra: dict[str, torch.Tensor],
        scale: float = 2.0,
        mask: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        y = x * scale + cache[0]
        return {"y": y, "z": (extra["a"] - extra["b"]).sum(-1), "past": (cache[1] - x,)}


def example() -> tuple[tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    args = (
        torch.randn(2, 3),
        [torch.randn(2, 3), torch.randn(2, 3)],
        {"a": torch.randn(4, 5), "b": torch.randn(4, 5)},
    )
    return args, {"scale": 3.0}


@pytest.fixture(scope="module")
def exported(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[onnx_export.ONNXProgram, OnnxModule]:
    args, kwargs = example()
    program = onnx_export.dynamo_export(Nested(), *args, **kwargs)
    path = program.save(tmp_path_factory.mktemp("property") / "nested.onnx")
    return program, onnx_export.load(pathlib.Path(path))


DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.bool,
    torch.complex64,
]


@st.composite
def tensors(draw: st.DrawFn, like: torch.Tensor) -> Any:
    """A tensor like ``like``, or one of another dtype, rank or size."""
    dtype = draw(st.sampled_from([like.dtype] * 4 + DTYPES))
    shape = list(like.shape)
    if draw(st.integers(0, 3)) == 0:
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
    elif draw(st.integers(0, 3)) == 0 and shape:
        axis = draw(st.integers(0, len(shape) - 1))
        shape[axis] = draw(st.integers(0, 6))
    data = torch.randn(shape).mul(3)
    value = data.to(dtype) if not dtype.is_complex else torch.complex(data, data)
    return value if dtype is not torch.bool else data > 0


OTHER_VALUES = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(0, 2), max_size=2),
    st.just(np.float32(1.0)),
)


def leaf(like: torch.Tensor) -> st.SearchStrategy[Any]:
    return st.one_of(tensors(like), tensors(like), tensors(like), OTHER_VALUES)


@st.composite
def containers(draw: st.DrawFn, like: Any) -> Any:
    """``like`` (a tensor, list or dict) with its leaves and structure perturbed."""
    if isinstance(like, torch.Tensor):
        return draw(leaf(like))
    if isinstance(like, list):
        items = [draw(containers(item)) for item in like]
        change = draw(st.integers(0, 5))
        if change == 0:
            items = items[:-1]
        elif change == 1:
            items = [*items, torch.randn(2, 3)]
        elif change == 2:
            return tuple(items)
        return items
    items = {key: draw(containers(value)) for key, value in like.items()}
    change = draw(st.integers(0, 5))
    if change == 0:
        items.pop(draw(st.sampled_from(sorted(items))))
    elif change == 1:
        items["new"] = torch.randn(1)
    elif change == 2:
        return list(items.values())
    return items


MODES = [
    "valid",
    "valid",
    "valid",
    "leaf",
    "leaf",
    "leaf",
    "structure",
    "constant",
    "binding",
    "wild",
]


def _replace_leaf(draw: st.DrawFn, inputs: list[Any]) -> list[Any]:
    """``inputs`` with one tensor leaf replaced (other dtype, shape, or not a tensor)."""
    leaves, spec = pytree.tree_flatten(inputs)
    index = draw(st.integers(0, len(leaves) - 1))
    leaves[index] = draw(leaf(leaves[index]))
    return list(pytree.tree_unflatten(leaves, spec))


@st.composite
def calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call of ``Nested``: valid, or with one kind of mistake (or many, for "wild")."""
    (x, cache, extra), _ = example()
    mode = draw(st.sampled_from(MODES))
    inputs: list[Any] = [x, cache, extra]
    if mode == "leaf":
        inputs = _replace_leaf(draw, inputs)
    elif mode == "structure":
        index = draw(st.integers(1, 2))
        inputs[index] = draw(containers(inputs[index]))
    elif mode == "wild":
        inputs = [draw(containers(v)) for v in inputs]
    named: dict[str, Any] = {"scale": 3.0}
    if mode == "constant":
        named["scale"] = draw(st.sampled_from([3, 2.0, "3", None, float("nan"), True, 3.0]))
    elif mode == "wild" and draw(st.booleans()):
        named.pop("scale")
    if mode in ("binding", "wild") and draw(st.booleans()):
        named["mask"] = None
    by_name = draw(st.integers(0, 3))
    names = ["x", "cache", "extra"]
    for name in names[len(names) - by_name :]:
        named[name] = inputs.pop()
    if mode == "binding":
        mistake = draw(st.sampled_from(["unknown", "duplicate", "extra", "missing"]))
        if mistake == "unknown":
            named["unknown"] = torch.randn(2, 3)
        elif mistake == "duplicate" and inputs:
            named["x"] = torch.randn(2, 3)
        elif mistake == "extra":
            inputs.append(torch.randn(2, 3))
        elif inputs:
            inputs.pop()
    return tuple(inputs), named


def _tensor_leaves(value: Any) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(value, is_leaf=lambda v: isinstance(v, np.ndarray))
    return [torch.as_tensor(v) for v in leaves if isinstance(v, torch.Tensor | np.ndarray)]


def _check_matches_eager(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with torch.no_grad():
        expected = _tensor_leaves(Nested()(*args, **kwargs))
    got = _tensor_leaves(result)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def _to_numpy(value: Any) -> Any:
    return pytree.tree_map(
        lambda v: v.numpy() if isinstance(v, torch.Tensor) and v.dtype != torch.bfloat16 else v,
        value,
    )


def _outcome(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's result, or ``None`` after a documented error."""
    try:
        return function(*args, **kwargs)
    except DOCUMENTED:
        return None


PROPERTY = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(call=calls())
def test_loaded_and_in_process_calls_run_or_raise_ours(
    exported: tuple[onnx_export.ONNXProgram, OnnxModule], call: Any
) -> None:
    program, module = exported
    args, kwargs = call
    outcomes = [
        _outcome(module, args, kwargs),
        _outcome(module, *_to_numpy((args, kwargs))),
        _outcome(program, args, kwargs),
    ]
    ran = [result is not None for result in outcomes]
    assert len(set(ran)) == 1, f"torch/numpy/in-process calls disagree: {ran}"
    if ran[0]:
        _check_matches_eager(outcomes[0], args, kwargs)
        _check_matches_eager(outcomes[1], args, kwargs)


@settings(PROPERTY, max_examples=40)
@given(call=calls())
def test_verify_runs_or_raises_ours(
    exported: tuple[onnx_export.ONNXProgram, OnnxModule], call: Any
) -> None:
    program, _ = exported
    args, kwargs = call
    result = _outcome(program.verify, args, kwargs)
    call_result = _outcome(program, args, kwargs)
    assert (result is None) == (call_result is None), "verify and a call disagree"
    if result is not None:
        assert result.ok, result


class Pair(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x + y).relu(), x.sum(-1)


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory: pytest.TempPathFactory) -> OnnxModule:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}, "y": {0: "batch"}})
    program = onnx_export.dynamo_export(
        Pair(), torch.randn(3, 4), torch.randn(3, 4), export_options=options
    )
    return onnx_export.load(program.save(tmp_path_factory.mktemp("dynamic") / "pair.onnx"))


SIZES = st.integers(0, 6)


@settings(PROPERTY, max_examples=80)
@given(
    x_shape=st.one_of(st.tuples(SIZES, st.just(4)), st.lists(SIZES, max_size=3).map(tuple)),
    y_shape=st.one_of(st.tuples(SIZES, st.just(4)), st.lists(SIZES, max_size=3).map(tuple)),
    dtype=st.sampled_from([torch.float32, torch.float32, torch.float64, torch.int64]),
)
def test_dynamic_dims_run_or_raise_ours(
    dynamic: OnnxModule,
    x_shape: tuple[int, ...],
    y_shape: tuple[int, ...],
    dtype: torch.dtype,
) -> None:
    x, y = torch.randn(x_shape).to(dtype), torch.randn(y_shape)
    result = _outcome(dynamic, (x, y), {})
    if result is None:
        return
    with torch.no_grad():
        expected = Pair()(x, y)
    for got, want in zip(_tensor_leaves(result), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
