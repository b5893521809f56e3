"""Loading: a missing file, a dtype ONNX Runtime's CPU lacks kernels for, ``upcast``, reprs.

The models are built with ``onnx.helper`` (no torch): a bfloat16 ``Gemm`` + ``Mul`` with a
bfloat16 weight, constant and ``Cast``, as a bfloat16 export comes out.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_export import adapters
from onnx_export.adapters import (
    AdapterError,
    InputDtypeError,
    MissingKernelError,
    ModelNotFoundError,
    OnnxModule,
    build_adapter_spec,
)

BF16 = TensorProto.BFLOAT16


def bfloat16_model(path: Path, weight: np.ndarray) -> Path:
    """``y = Cast(Gemm(x, w) * 2, to=bfloat16)``, all in bfloat16, with its adapter spec."""
    x = np.zeros((2, 4), ml_dtypes.bfloat16)
    spec = build_adapter_spec(None, (x,), {}, [np.zeros((2, 3), ml_dtypes.bfloat16)])
    w = numpy_helper.from_array(weight.astype(np.float32), "w")
    w_bf16 = helper.make_tensor(
        "w", BF16, w.dims, weight.astype(ml_dtypes.bfloat16).tobytes(), raw=True
    )
    two = helper.make_tensor("two", BF16, [], np.array(2, ml_dtypes.bfloat16).tobytes(), raw=True)
    nodes = [
        helper.make_node("Gemm", ["args.0", "w"], ["h"], name="Gemm_node_0"),
        helper.make_node("Constant", [], ["c"], value=two),
        helper.make_node("Mul", ["h", "c"], ["m"], name="Mul_node_1"),
        helper.make_node("Cast", ["m"], ["output.0"], to=BF16),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("args.0", BF16, [2, 4])],
        [helper.make_tensor_value_info("output.0", BF16, [2, 3])],
        initializer=[w_bf16],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    helper.set_model_props(model, {adapters.METADATA_KEY: spec.to_json()})
    onnx.save(model, path)
    return path


@pytest.fixture
def bf16_path(tmp_path: Path) -> Path:
    weight = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    return bfloat16_model(tmp_path / "bf16.onnx", weight)


@pytest.mark.parametrize("what", ["missing", "folder"])
def test_loading_no_file_is_a_file_not_found_error(tmp_path: Path, what: str) -> None:
    path = tmp_path / "model.onnx"
    if what == "folder":
        path.mkdir()
    with pytest.raises(FileNotFoundError) as caught:
        adapters.load(path)
    error = caught.value
    assert isinstance(error, ModelNotFoundError) and isinstance(error, AdapterError)
    assert error.filename == str(path)
    assert str(path) in str(error)
    assert ("a folder" if what == "folder" else "no file") in str(error)


def test_missing_bfloat16_kernel_names_dtype_ops_and_ways_out(bf16_path: Path) -> None:
    with pytest.raises(MissingKernelError) as caught:
        adapters.load(bf16_path)
    message = str(caught.value)
    assert caught.value.dtype == "bfloat16"
    assert "no bfloat16 kernel for Gemm" in message and "Mul" in message
    assert "upcast=['bfloat16']" in message and "providers=['cuda']" in message
    assert isinstance(caught.value, NotImplementedError)


def test_upcast_runs_bfloat16_on_cpu_and_keeps_the_dtypes(bf16_path: Path) -> None:
    module = adapters.load(bf16_path, upcast=["bfloat16"])
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(ml_dtypes.bfloat16)
    (y,) = module(x)
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == (2, 3)
    weight = numpy_helper.to_array(onnx.load(bf16_path).graph.initializer[0]).astype(np.float32)
    expected = (x.astype(np.float32) @ weight) * 2
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=2 * 2**-8, atol=2**-8)
    assert "upcast=['bfloat16']" in repr(module)


def test_upcast_of_an_unknown_dtype_is_refused(bf16_path: Path) -> None:
    with pytest.raises(ValueError, match="upcast: expected dtype names among"):
        adapters.load(bf16_path, upcast=["int8"])


def test_dtype_hint_is_valid_code(bf16_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = adapters.load(bf16_path, upcast=["bfloat16"])
    x = np.ones((2, 4), np.float32)
    with pytest.raises(InputDtypeError) as caught:
        module(x)
    message = str(caught.value)
    assert "numpy.bfloat16" not in message
    assert "x.astype(ml_dtypes.bfloat16)" in message and "x.to(torch.bfloat16)" in message
    np.testing.assert_array_equal(x.astype(ml_dtypes.bfloat16).astype(np.float32), x)

    from onnx_export.adapters import _tensor_checks

    monkeypatch.setattr(_tensor_checks, "numpy_dtype", lambda name: None)  # no ml_dtypes
    with pytest.raises(InputDtypeError) as caught:
        OnnxModule(bf16_path, upcast=["bfloat16"])(x)
    message = str(caught.value)
    assert "ml_dtypes.bfloat16" not in message and "numpy.bfloat16" not in message
    assert "x.to(torch.bfloat16)" in message and "numpy has no bfloat16" in message


def test_repr_lists_inputs_outputs_and_providers(tmp_path: Path) -> None:
    x = np.ones(2, np.float32)
    spec = build_adapter_spec(None, ({"a": x}, 3), {}, [x])
    graph = helper.make_graph(
        [helper.make_node("Neg", ["args.0.a"], ["output.0"])],
        "g",
        [helper.make_tensor_value_info("args.0.a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("output.0", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    module = OnnxModule(model.SerializeToString(), spec)
    text = repr(module)
    assert text.startswith("OnnxModule(inputs=[") and "float32(2,)" in text
    assert "=3" in text and "output.0: float32(2,)" in text
    assert "providers=['CPUExecutionProvider']" in text and "object at" not in text
    np.testing.assert_array_equal(module({"a": x}, 3)[0], -x)
