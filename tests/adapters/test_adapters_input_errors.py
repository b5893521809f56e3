"""InputAdapter: each validation error names the input by path, what was expected and what came."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from onnx_export.adapters import (
    ConstantMismatchError,
    InputAdapter,
    InputBindingError,
    InputDtypeError,
    InputShapeError,
    InputStructureError,
    build_adapter_spec,
)


def forward(x, past_key_values, mask=None, scale=2.0): ...  # type: ignore[no-untyped-def]


def kv(
    batch: int = 2, dtype: Any = np.float32
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    return np.zeros((batch, 4), dtype), np.ones((batch, 4), dtype)


def make_adapter() -> InputAdapter:
    spec = build_adapter_spec(
        inspect.signature(forward),
        ({"ids": np.zeros((2, 3), np.int64)}, [kv(), kv()]),
        {},
        np.zeros(1),
        input_shapes={
            0: ("batch", 3),
            1: ("batch", 4),
            2: ("batch", 4),
            3: ("batch", 4),
            4: ("batch", 4),
        },
    )
    return InputAdapter(spec)


def good_inputs(batch: int = 2) -> tuple[dict[str, Any], list[Any]]:
    return {"ids": np.zeros((batch, 3), np.int64)}, [kv(batch), kv(batch)]


def test_good_inputs_give_flat_arrays_in_graph_order() -> None:
    x, past = good_inputs(batch=5)
    flat = make_adapter()(x, past)
    assert [a.shape for a in flat] == [(5, 3)] + [(5, 4)] * 4  # type: ignore[attr-defined]
    assert flat[0] is x["ids"] and flat[4] is past[1][1]


def test_keywords_and_dict_order_do_not_matter() -> None:
    x, past = good_inputs()
    adapter = make_adapter()
    reordered = adapter(past_key_values=past, x=dict(reversed(list(x.items()))), scale=2.0)
    assert all(a is b for a, b in zip(reordered, adapter(x, past), strict=True))


def test_a_numpy_scalar_equal_to_the_recorded_constant_passes() -> None:
    """torch.export records np.float64(2.0) as 2.0: the call that exported is accepted."""
    x, past = good_inputs()
    adapter = make_adapter()
    for scale in (np.float64(2.0), np.float32(2.0)):
        flat = adapter(x, past, scale=scale)
        assert all(a is b for a, b in zip(flat, adapter(x, past), strict=True))
    with pytest.raises(ConstantMismatchError, match=r"got float64 np\.float64\(2\.5\)"):
        adapter(x, past, scale=np.float64(2.5))
    with pytest.raises(ConstantMismatchError, match=r"expected the constant 2\.0 \(float\)"):
        adapter(x, past, scale=np.int64(2))  # an int is another constant than 2.0


def test_dicts_with_several_keys_are_reordered() -> None:
    spec = build_adapter_spec(None, ({"a": np.zeros(1), "b": np.ones(1)},), {}, 0)
    a, b = np.zeros(1), np.ones(1)
    assert InputAdapter(spec)({"b": b, "a": a}) == [a, b]


Case = tuple[Any, type[Exception], list[str]]


def _with(path: str, value: object) -> tuple[tuple[Any, ...], dict[str, Any]]:
    x, past = good_inputs()
    kwargs: dict[str, Any] = {}
    if path == "dtype":
        past[1] = kv(dtype=np.float64)
    elif path == "rank":
        x["ids"] = np.zeros((2, 3, 1), np.int64)
    elif path == "static":
        x["ids"] = np.zeros((2, 4), np.int64)
    elif path == "symbolic":
        past[1] = kv(batch=3)
    elif path == "missing-list-item":
        past = past[:1]
    elif path == "extra-key":
        x["extra"] = np.zeros(1)
    elif path == "none-for-tensor":
        past[0] = (None, past[0][1])
    elif path == "tensor-for-none":
        kwargs["mask"] = np.zeros(1)
    elif path == "container-type":
        past = tuple(past)  # type: ignore[assignment]
    elif path == "python-list-for-tensor":
        x["ids"] = [[0, 0, 0], [0, 0, 0]]
    elif path == "constant":
        kwargs["scale"] = 3.0
    elif path == "constant-type":
        kwargs["scale"] = 2
    elif path == "tensor-for-constant":
        kwargs["scale"] = np.float32(3.0)  # np.float32(2.0) is the recorded 2.0, and passes
    return (x, past), kwargs


ERRORS = [
    (
        "dtype",
        InputDtypeError,
        ["past_key_values[1][0]: expected dtype float32, got float64", "Cast the input"],
    ),
    ("rank", InputShapeError, ["x['ids']: expected rank 2", "got rank 3", "Reshape"]),
    (
        "static",
        InputShapeError,
        [
            "x['ids']: expected size 3 at axis 1",
            "got shape (2, 4)",
            "re-export with a dynamic dimension",
        ],
    ),
    (
        "symbolic",
        InputShapeError,
        [
            "past_key_values[1][0]: expected dimension 'batch' (axis 0) to be 2",
            "as in x['ids'] (axis 0), got 3",
            "must agree",
        ],
    ),
    (
        "missing-list-item",
        InputStructureError,
        ["past_key_values: expected a list of length 2, got a list of length 1", "same nesting"],
    ),
    (
        "extra-key",
        InputStructureError,
        [
            "x: expected a dict with keys ['ids'], got a dict with keys ['ids', 'extra']",
            "unexpected 'extra'",
        ],
    ),
    (
        "none-for-tensor",
        InputStructureError,
        ["past_key_values[0][0]: expected a tensor (float32, shape ('batch', 4)), got None"],
    ),
    (
        "tensor-for-none",
        InputStructureError,
        ["mask: expected None (the model was exported with None here), got a numpy.ndarray"],
    ),
    (
        "container-type",
        InputStructureError,
        ["past_key_values: expected a list of length 2, got a tuple of length 2"],
    ),
    (
        "python-list-for-tensor",
        InputStructureError,
        ["x['ids']: expected a tensor (int64, shape ('batch', 3)), got a list of length 2"],
    ),
    (
        "constant",
        ConstantMismatchError,
        [
            "scale: expected the constant 2.0 (float) the model was exported with, got float 3.0",
            "re-export",
        ],
    ),
    (
        "constant-type",
        ConstantMismatchError,
        ["scale: expected the constant 2.0 (float)", "got int 2"],
    ),
    (
        "tensor-for-constant",
        ConstantMismatchError,
        ["scale: expected the constant 2.0", "got a numpy.float32"],
    ),
]


@pytest.mark.parametrize(("case", "error", "parts"), ERRORS, ids=[c for c, _, _ in ERRORS])
def test_error_names_path_expected_and_got(
    case: str, error: type[Exception], parts: list[str]
) -> None:
    args, kwargs = _with(case, None)
    with pytest.raises(error) as info:
        make_adapter()(*args, **kwargs)
    for part in parts:
        assert part in str(info.value)


def test_binding_error() -> None:
    with pytest.raises(InputBindingError, match="missing required argument 'past_key_values'"):
        make_adapter()(good_inputs()[0])


def test_unexpected_keyword_is_a_binding_error() -> None:
    with pytest.raises(InputBindingError, match="unexpected keyword argument 'temperature'"):
        make_adapter()(*good_inputs(), temperature=1.0)


def test_non_tensor_leaf_type_is_a_structure_error() -> None:
    spec = build_adapter_spec(None, (np.zeros(2, np.float32),), {}, 0)
    with pytest.raises(
        InputStructureError,
        match=r"args\[0\]: expected a tensor \(numpy.ndarray or torch.Tensor\) of dtype float32",
    ):
        InputAdapter(spec)("not a tensor")


def test_torch_tensors_are_checked_and_passed_through() -> None:
    torch = pytest.importorskip("torch")
    spec = build_adapter_spec(
        None, (np.zeros((2, 3), np.float32),), {}, 0, input_shapes={0: ("n", 3)}
    )
    adapter = InputAdapter(spec)
    t = torch.zeros(4, 3)
    assert adapter(t)[0] is t
    with pytest.raises(InputDtypeError, match=r"args\[0\]: expected dtype float32, got float64"):
        adapter(torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(InputShapeError, match=r"args\[0\]: expected size 3 at axis 1"):
        adapter(torch.zeros(4, 2))


def test_complex_inputs_become_real_views() -> None:
    spec = build_adapter_spec(None, (np.zeros(2, np.complex64),), {}, 0)
    z = np.array([1 + 2j, 3 - 4j], np.complex64)
    (real,) = InputAdapter(spec)(z)
    np.testing.assert_array_equal(real, np.array([[1, 2], [3, -4]], np.float32))  # type: ignore[arg-type]


def test_steps_run_in_documented_order() -> None:
    names = [type(step).__name__ for step in make_adapter().steps]
    assert names == [
        "BindToSignature",
        "FlattenInputs",
        "CheckStructure",
        "RemoveNones",
        "CheckConstants",
        "IntsToArrays",
        "CastInputs",
        "CheckTensors",
        "ComplexToRealView",
    ]


def test_var_keyword_names_must_match_the_export() -> None:
    def fwd(x, **extra): ...  # type: ignore[no-untyped-def]

    spec = build_adapter_spec(inspect.signature(fwd), (np.zeros(1),), {"a": np.zeros(1)}, 0)
    adapter = InputAdapter(spec)
    with pytest.raises(InputStructureError) as info:
        adapter(np.zeros(1), b=np.zeros(1))
    assert "forward's keyword arguments: expected ['x', 'a'], got ['x', 'b']" in str(info.value)
    assert "(missing ['a'], unexpected ['b'])" in str(info.value)


def test_var_positional_count_must_match_the_export() -> None:
    spec = build_adapter_spec(None, (np.zeros(1), np.zeros(1)), {}, 0)
    with pytest.raises(
        InputStructureError, match=r"positional arguments: expected 2 \(as at export\), got 3"
    ):
        InputAdapter(spec)(np.zeros(1), np.zeros(1), np.zeros(1))


def test_var_keyword_order_does_not_matter() -> None:
    def fwd(x, **extra): ...  # type: ignore[no-untyped-def]

    a, b, x = np.zeros(1), np.ones(1), np.full(1, 2.0)
    spec = build_adapter_spec(inspect.signature(fwd), (x,), {"a": a, "b": b}, 0)
    flat = InputAdapter(spec)(x, b=b, a=a)
    assert flat[0] is x and flat[1] is a and flat[2] is b
