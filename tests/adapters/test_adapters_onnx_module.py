"""OnnxModule on small ONNX models: nested inputs in, nested outputs out, numpy and torch."""

from __future__ import annotations

import collections
import inspect
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from adapters_testing import assert_tree_close, make_model
from onnx import TensorProto, helper

from onnx_export import adapters
from onnx_export.adapters import (
    AdapterSpecError,
    ConstantMismatchError,
    InputDtypeError,
    InputShapeError,
    InputStructureError,
    ModelRunError,
    OnnxModule,
    build_adapter_spec,
)

F = TensorProto.FLOAT
Out = collections.namedtuple("Out", ["logits", "aux"])


def forward(x, y, mask=None, scale=2.0): ...  # type: ignore[no-untyped-def]


def arrays(
    batch: int = 2, seed: int = 0
) -> tuple[dict[str, np.ndarray[Any, Any]], list[np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(seed)
    a, b, y0 = (rng.standard_normal((batch, 3)).astype(np.float32) for _ in range(3))
    return {"a": a, "b": b}, [y0]


def expected(x: dict[str, Any], y: list[Any]) -> dict[str, Any]:
    return {"sum": x["a"] + x["b"], "pair": (x["a"] * y[0], "tag")}


def nested_model(tmp_path: Path | None = None) -> tuple[onnx.ModelProto, adapters.AdapterSpec]:
    x, y = arrays()
    batch = ("batch", 3)
    spec = build_adapter_spec(
        inspect.signature(forward),
        (x, y),
        {},
        expected(x, y),
        input_shapes={0: batch, 1: batch, 2: batch},
        output_shapes={0: batch, 1: batch},
    )
    model = make_model(
        [("x.a", F, batch), ("x.b", F, batch), ("y.0", F, batch)],
        [("output.sum", F, batch), ("output.pair.0", F, batch)],
        [
            helper.make_node("Add", ["x.a", "x.b"], ["output.sum"]),
            helper.make_node("Mul", ["x.a", "y.0"], ["output.pair.0"]),
        ],
        spec,
    )
    return model, spec


@pytest.fixture
def nested_path(tmp_path: Path) -> Path:
    model, _ = nested_model()
    path = tmp_path / "nested.onnx"
    onnx.save(model, path)
    return path


def test_numpy_in_numpy_out(nested_path: Path) -> None:
    module = adapters.load(nested_path)
    x, y = arrays(batch=5, seed=1)
    assert_tree_close(module(x, y), expected(x, y))
    assert module.input_names == ["x.a", "x.b", "y.0"]
    assert module.output_names == ["output.sum", "output.pair.0"]
    assert module.providers == ["CPUExecutionProvider"]


def test_keywords_defaults_and_dict_order(nested_path: Path) -> None:
    module = adapters.load(nested_path)
    x, y = arrays()
    out = module(y=y, x={"b": x["b"], "a": x["a"]}, mask=None, scale=2.0)
    assert_tree_close(out, expected(x, y))


def test_torch_in_torch_out(nested_path: Path) -> None:
    torch = pytest.importorskip("torch")
    module = adapters.load(nested_path)
    x, y = arrays()
    tx = {k: torch.from_numpy(v).requires_grad_() for k, v in x.items()}
    out = module(tx, [torch.from_numpy(y[0])])
    want = expected(x, y)
    assert_tree_close(
        out,
        {"sum": torch.from_numpy(want["sum"]), "pair": (torch.from_numpy(want["pair"][0]), "tag")},
    )


def test_input_errors_surface(nested_path: Path) -> None:
    module = adapters.load(nested_path)
    x, y = arrays()
    with pytest.raises(InputStructureError, match="mask: expected None"):
        module(x, y, mask=np.ones(1))
    with pytest.raises(ConstantMismatchError, match=r"scale: expected the constant 2\.0"):
        module(x, y, scale=1.0)


def test_spec_passed_explicitly_wins_over_none(nested_path: Path) -> None:
    _, spec = nested_model()
    plain = onnx.load(nested_path)
    del plain.metadata_props[:]
    module = OnnxModule(plain.SerializeToString(), spec)
    x, y = arrays()
    assert_tree_close(module(x, y), expected(x, y))
    assert module.spec == spec


def namedtuple_model() -> bytes:
    x = np.zeros((2, 2), np.float32)
    spec = build_adapter_spec(None, (x,), {}, Out(x, [x]))
    model = make_model(
        [("args.0", F, (2, 2))],
        [("output.logits", F, (2, 2)), ("output.aux.0", F, (2, 2))],
        [
            helper.make_node("Neg", ["args.0"], ["output.logits"]),
            helper.make_node("Identity", ["args.0"], ["output.aux.0"]),
        ],
        spec,
    )
    return model.SerializeToString()


def test_namedtuple_outputs_need_allowed_classes() -> None:
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    plain = OnnxModule(namedtuple_model())(x)
    assert_tree_close(plain, {"logits": -x, "aux": [x]})
    rebuilt = OnnxModule(namedtuple_model(), allowed_classes=[Out])(x)
    assert_tree_close(rebuilt, Out(-x, [x]))


def test_complex_input_and_output_through_real_view() -> None:
    z = np.array([1 + 2j, -3j, 4], np.complex64)
    spec = build_adapter_spec(None, (z,), {}, z)
    model = make_model(
        [("args.0", F, (3, 2))],
        [("output", F, (3, 2))],
        [helper.make_node("Neg", ["args.0"], ["output"])],
        spec,
    )
    module = OnnxModule(model.SerializeToString())
    assert_tree_close(module(z), -z)


def test_complex_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    z = np.array([1 + 2j, -3j], np.complex64)
    spec = build_adapter_spec(None, (z,), {}, z)
    model = make_model(
        [("args.0", F, (2, 2))],
        [("output", F, (2, 2))],
        [helper.make_node("Neg", ["args.0"], ["output"])],
        spec,
    )
    out = OnnxModule(model.SerializeToString())(torch.from_numpy(z))
    assert_tree_close(out, torch.from_numpy(-z))


def test_output_constants_are_reinserted() -> None:
    x = np.ones(2, np.float32)
    spec = build_adapter_spec(None, (x,), {}, (x, 3, None, "mean"))
    model = make_model(
        [("args.0", F, (2,))],
        [("output.0", F, (2,))],
        [helper.make_node("Identity", ["args.0"], ["output.0"])],
        spec,
    )
    assert_tree_close(OnnxModule(model.SerializeToString())(x), (x, 3, None, "mean"))


def flat_model() -> onnx.ModelProto:
    return make_model(
        [("a", F, (2,)), ("b", F, (2,))],
        [("c", F, (2,))],
        [helper.make_node("Add", ["a", "b"], ["c"])],
    )


def test_model_without_metadata_runs_flat(tmp_path: Path) -> None:
    path = tmp_path / "flat.onnx"
    onnx.save(flat_model(), path)
    module = adapters.load(path)
    a, b = np.ones(2, np.float32), np.full(2, 2, np.float32)
    assert module.spec is None
    assert_tree_close(module(a, b), [a + b])
    assert_tree_close(module(b=b, a=a), [a + b])
    with pytest.raises(InputStructureError, match=r"got none for \['b'\]"):
        module(a)
    with pytest.raises(InputStructureError, match="expected the graph inputs"):
        module(a, b, a)


def test_flat_mode_checks_inputs_against_the_graph_before_onnxruntime() -> None:
    """A file of another producer: its declared dtypes, ranks and fixed sizes are checked,
    and ONNX Runtime's own failures come as ModelRunError, never its raw exception."""
    model = make_model(
        [("x", F, ("n", 3)), ("y", F, ("n", 3))],
        [("z", F, ("n", 3))],
        [helper.make_node("Add", ["x", "y"], ["z"])],
    )
    module = OnnxModule(model.SerializeToString())
    ones = np.ones((2, 3), np.float32)
    assert_tree_close(module(ones, ones), [2 * ones])
    with pytest.raises(InputDtypeError, match="x: expected dtype float32, got float64"):
        module(ones.astype(np.float64), ones)
    with pytest.raises(InputShapeError, match=r"y: expected size 3 at axis 1"):
        module(ones, np.ones((2, 4), np.float32))
    with pytest.raises(InputShapeError, match="x: expected rank 2"):
        module(np.ones(3, np.float32), ones)
    # 'n' is shared by both inputs, so it is not tied: ONNX Runtime's broadcast error comes
    # as a ModelRunError that says the file records no sizes.
    with pytest.raises(ModelRunError, match="has no adapter metadata") as caught:
        module(ones, np.ones((3, 3), np.float32))
    assert "[ONNXRuntimeError]" not in str(caught.value)


def test_flat_mode_accepts_torch() -> None:
    torch = pytest.importorskip("torch")
    out = OnnxModule(flat_model().SerializeToString())(torch.ones(2), torch.ones(2))
    assert_tree_close(out, [torch.full((2,), 2.0)])


def _with_metadata(text: str) -> bytes:
    model = flat_model()
    helper.set_model_props(model, {adapters.METADATA_KEY: text})
    return model.SerializeToString()


def test_metadata_of_another_model_is_rejected() -> None:
    _, spec = nested_model()
    with pytest.raises(
        AdapterSpecError,
        match=r"adapter spec field 'inputs': expected one tensor leaf per graph input \['a', 'b'\]",
    ):
        OnnxModule(_with_metadata(spec.to_json()))


def test_corrupt_metadata_is_rejected() -> None:
    with pytest.raises(AdapterSpecError, match="does not parse"):
        OnnxModule(_with_metadata('{"version": 1,'))


def test_dtype_that_does_not_fit_the_graph_is_rejected() -> None:
    spec = build_adapter_spec(
        None,
        (np.ones(2, np.int64), np.ones(2, np.float32)),
        {},
        np.ones(2, np.float32),
        input_names=lambda i, _: "ab"[i],
        output_names=["c"],
    )
    with pytest.raises(
        AdapterSpecError,
        match=r"'inputs\[0\].tensor.dtype': expected the graph's tensor\(float\), "
        r"got 'tensor\(int64\)'",
    ):
        OnnxModule(_with_metadata(spec.to_json()))


def test_static_size_that_does_not_fit_the_graph_is_rejected() -> None:
    spec = build_adapter_spec(
        None,
        (np.ones(3, np.float32), np.ones(2, np.float32)),
        {},
        np.ones(2, np.float32),
        input_names=lambda i, _: "ab"[i],
        output_names=["c"],
    )
    with pytest.raises(AdapterSpecError, match=r"'inputs\[0\].tensor.shape'"):
        OnnxModule(_with_metadata(spec.to_json()))


def test_unavailable_provider_falls_back_to_cpu_with_a_warning() -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = OnnxModule(flat_model().SerializeToString(), providers=["cuda"])
    assert module.providers == ["CPUExecutionProvider"]
    assert any("falling back to CPUExecutionProvider" in str(w.message) for w in caught)


def test_model_output_outputs() -> None:
    torch = pytest.importorskip("torch")
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")
    t = torch.ones(2, 2)
    eager = modeling_outputs.BaseModelOutput(last_hidden_state=t, hidden_states=(t,))
    spec = build_adapter_spec(None, (t,), {}, eager)
    model = make_model(
        [("args.0", F, (2, 2))],
        [("output.last_hidden_state", F, (2, 2)), ("output.hidden_states.0", F, (2, 2))],
        [
            helper.make_node("Identity", ["args.0"], ["output.last_hidden_state"]),
            helper.make_node("Neg", ["args.0"], ["output.hidden_states.0"]),
        ],
        spec,
    )
    x = np.full((2, 2), 3, np.float32)
    as_dict = OnnxModule(model.SerializeToString())(x)
    assert_tree_close(as_dict, {"last_hidden_state": x, "hidden_states": (-x,)})
    cls = modeling_outputs.BaseModelOutput
    rebuilt = OnnxModule(model.SerializeToString(), allowed_classes=[cls])(torch.from_numpy(x))
    assert type(rebuilt) is cls
    assert_tree_close(rebuilt.hidden_states, (torch.from_numpy(-x),))


def bfloat16_model() -> bytes:
    torch = pytest.importorskip("torch")
    t = torch.ones(2, dtype=torch.bfloat16)
    spec = build_adapter_spec(None, (t, torch.ones(2)), {}, (t, torch.ones(2)))
    model = make_model(
        [("args.0", TensorProto.BFLOAT16, (2,)), ("args.1", F, (2,))],
        [("output.0", TensorProto.BFLOAT16, (2,)), ("output.1", F, (2,))],
        [
            helper.make_node("Identity", ["args.0"], ["output.0"]),
            helper.make_node("Neg", ["args.1"], ["output.1"]),
        ],
        spec,
    )
    return model.SerializeToString()


def test_bfloat16_through_ortvalues() -> None:
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    module = OnnxModule(bfloat16_model())
    t = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    assert_tree_close(module(t, torch.ones(2)), (t, -torch.ones(2)))
    a = np.array([1.5, 3], ml_dtypes.bfloat16)
    assert_tree_close(module(a, np.ones(2, np.float32)), (a, -np.ones(2, np.float32)))
