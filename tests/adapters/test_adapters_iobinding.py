"""CudaIOBinding's binding logic, checked with CPU tensors and a recording binding.

The CUDA run itself needs a GPU and is not exercised here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_export.adapters import TensorSpec
from onnx_export.adapters._iobinding import CudaIOBinding


class RecordingBinding:
    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []
        self.outputs: list[dict[str, Any]] = []

    def bind_input(self, **kwargs: Any) -> None:
        self.inputs.append(kwargs)

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Any = None,
        buffer_ptr: Any = None,
    ) -> None:
        self.outputs.append(
            {
                "name": name,
                "device_type": device_type,
                "shape": shape,
                "element_type": element_type,
                "buffer_ptr": buffer_ptr,
            }
        )


def test_inputs_bound_by_pointer_and_known_outputs_preallocated() -> None:
    torch = pytest.importorskip("torch")
    runner = CudaIOBinding(
        session=None,
        inputs=[TensorSpec("x", "float32", ("batch", 3)), TensorSpec("z", "complex64", ("batch",))],
        outputs=[
            TensorSpec("y", "float32", ("batch", 3)),
            TensorSpec("n", "int64", ("k",)),
            TensorSpec("w", "complex64", ("batch",)),
        ],
    )
    binding = RecordingBinding()
    x = torch.ones(3, 4).t()  # not contiguous: bound through a contiguous copy
    z = torch.zeros(4, 2)  # the real view of a complex input
    device = torch.device("cpu")
    keep, dims = runner._bind_inputs(torch, binding, [x, np.zeros((4, 2), np.float32)], device, 0)
    assert dims == {"batch": 4}
    assert [b["name"] for b in binding.inputs] == ["x", "z"]
    assert binding.inputs[0]["shape"] == (4, 3)
    assert binding.inputs[0]["buffer_ptr"] == keep[0].data_ptr() and keep[0].is_contiguous()
    assert binding.inputs[0]["element_type"] == np.dtype(np.float32)
    assert binding.inputs[1]["shape"] == tuple(z.shape)
    outputs = runner._bind_outputs(torch, binding, dims, device, 0)
    assert outputs[0].shape == (4, 3) and outputs[0].dtype == torch.float32
    assert outputs[1] is None  # 'k' is unknown: ONNX Runtime allocates it
    assert outputs[2].shape == (4, 2) and outputs[2].dtype == torch.float32
    assert binding.outputs[0]["buffer_ptr"] == outputs[0].data_ptr()
    assert binding.outputs[1] == {
        "name": "n",
        "device_type": "cuda",
        "shape": None,
        "element_type": None,
        "buffer_ptr": None,
    }


def test_extended_dtypes_are_bound_by_onnx_element_type() -> None:
    torch = pytest.importorskip("torch")
    assert CudaIOBinding.supports([TensorSpec("x", "bfloat16", (1,))], [])
    assert CudaIOBinding.supports(
        [TensorSpec("x", "complex64", (1,))], [TensorSpec("y", "bool", ())]
    )
    runner = CudaIOBinding(
        session=None,
        inputs=[TensorSpec("x", "bfloat16", ("batch", 2))],
        outputs=[TensorSpec("y", "bfloat16", ("batch", 2))],
    )
    binding = RecordingBinding()
    x = torch.ones(3, 2, dtype=torch.bfloat16)
    device = torch.device("cpu")
    _, dims = runner._bind_inputs(torch, binding, [x], device, 0)
    assert binding.inputs[0]["element_type"] == 16  # onnx.TensorProto.BFLOAT16
    outputs = runner._bind_outputs(torch, binding, dims, device, 0)
    assert outputs[0].dtype == torch.bfloat16 and outputs[0].shape == (3, 2)
    assert binding.outputs[0]["element_type"] == 16
