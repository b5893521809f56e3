"""Running a session on torch CUDA tensors in place, through ONNX Runtime's IOBinding.

Used only when the session runs on ``CUDAExecutionProvider`` and the inputs are torch CUDA
tensors: inputs are bound by ``data_ptr()`` (no host round trip) and outputs are written into
preallocated torch tensors when their shapes are known from the spec (static sizes, or
symbolic names also used by an input); otherwise ONNX Runtime allocates them on the device
and torch takes them over through DLPack (no copy; onnxruntime without DLPack: one copy
through the host). Dtypes numpy lacks (bfloat16, float8) are bound by their ONNX element
type. Kept apart from the rest of the runtime because its run cannot be exercised without a
GPU; the binding logic is tested with CPU tensors.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from ._dtypes import ONNX_ELEMENT_TYPES, numpy_dtype, onnx_value_dtype, torch_dtype
from ._spec import Dim, TensorSpec
from ._torch import torch_module

__all__ = ["CudaIOBinding", "element_type", "onnx_value_shape"]


def element_type(dtype: str) -> Any:
    """What ``bind_input``/``bind_output`` take for ``dtype``: a numpy dtype, else an int.

    onnxruntime takes an ``onnx.TensorProto`` element type for the dtypes numpy lacks.

    Example:
        >>> element_type("bfloat16"), element_type("float16")
        (16, dtype('float16'))
    """
    if dtype in ONNX_ELEMENT_TYPES:
        return ONNX_ELEMENT_TYPES[dtype]
    return numpy_dtype(dtype)


def onnx_value_shape(tensor: TensorSpec) -> tuple[Dim, ...]:
    """The shape of the ONNX value carrying ``tensor`` (complex: trailing axis of 2).

    Example:
        >>> onnx_value_shape(TensorSpec("z", "complex64", ("n",)))
        ('n', 2)
    """
    return (*tensor.shape, 2) if tensor.dtype.startswith("complex") else tensor.shape


class CudaIOBinding:
    """Binds torch CUDA tensors to a session's inputs and outputs and runs it.

    Args:
        session: An ``onnxruntime.InferenceSession`` using ``CUDAExecutionProvider``.
        inputs: Tensor specs of the graph inputs, in graph order.
        outputs: Tensor specs of the graph outputs, in graph order.

    Example:
        >>> CudaIOBinding.supports([TensorSpec("x", "bfloat16", ())], [])  # by element type
        True
    """

    def __init__(
        self, session: Any, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
    ) -> None:
        self._session = session
        run_options = importlib.import_module("onnxruntime").RunOptions()
        run_options.log_severity_level = 4  # failures raise; no raw log line beside them
        self._run_options = run_options
        self._inputs = tuple(
            (t.name, element_type(onnx_value_dtype(t.dtype)), onnx_value_shape(t)) for t in inputs
        )
        self._outputs = tuple(
            (
                t.name,
                element_type(onnx_value_dtype(t.dtype)),
                onnx_value_shape(t),
                onnx_value_dtype(t.dtype),
            )
            for t in outputs
        )

    @staticmethod
    def supports(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> bool:
        """Whether every tensor has an element type to bind it with (numpy's, or ONNX's).

        Example:
            >>> CudaIOBinding.supports([TensorSpec("x", "float32", ())], [])
            True
        """
        names = [onnx_value_dtype(t.dtype) for t in (*inputs, *outputs)]
        return all(element_type(n) is not None for n in names)

    def run(self, tensors: Sequence[Any]) -> list[Any]:
        """Run on CUDA tensors (numpy arrays are moved to the device first).

        Args:
            tensors: The ONNX inputs (after the input adapter), in graph order.

        Returns:
            The outputs as torch CUDA tensors, in graph order.
        """
        torch = torch_module()
        if torch is None:
            raise RuntimeError("CudaIOBinding.run needs torch, which this process has not imported")
        device = next(t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda)
        device_id = device.index if device.index is not None else torch.cuda.current_device()
        binding = self._session.io_binding()
        keep_alive, dims = self._bind_inputs(torch, binding, tensors, device, device_id)
        outputs = self._bind_outputs(torch, binding, dims, device, device_id)
        torch.cuda.current_stream(device).synchronize()  # inputs written by torch are ready
        self._session.run_with_iobinding(binding, self._run_options)
        binding.synchronize_outputs()
        del keep_alive
        if any(out is None for out in outputs):
            allocated = binding.get_outputs()
            outputs = [
                _to_torch(torch, allocated[i], device) if out is None else out
                for i, out in enumerate(outputs)
            ]
        return outputs

    def _bind_inputs(
        self, torch: Any, binding: Any, tensors: Sequence[Any], device: Any, device_id: int
    ) -> tuple[list[Any], dict[str, int]]:
        keep_alive: list[Any] = []
        dims: dict[str, int] = {}
        for (name, np_dtype, shape), value in zip(self._inputs, tensors, strict=True):
            tensor = value if isinstance(value, torch.Tensor) else torch.from_numpy(value)
            tensor = tensor.to(device).contiguous()
            keep_alive.append(tensor)
            dims.update(
                (d, int(s)) for d, s in zip(shape, tensor.shape, strict=True) if isinstance(d, str)
            )
            binding.bind_input(
                name=name,
                device_type="cuda",
                device_id=device_id,
                element_type=np_dtype,
                shape=tuple(tensor.shape),
                buffer_ptr=tensor.data_ptr(),
            )
        return keep_alive, dims

    def _bind_outputs(
        self, torch: Any, binding: Any, dims: dict[str, int], device: Any, device_id: int
    ) -> list[Any]:
        outputs: list[Any] = []
        for name, np_dtype, shape, dtype_name in self._outputs:
            sizes = [d if isinstance(d, int) else dims.get(d) for d in shape]
            if any(s is None for s in sizes):
                binding.bind_output(name, "cuda", device_id)
                outputs.append(None)
                continue
            out = torch.empty(sizes, dtype=torch_dtype(dtype_name), device=device)
            binding.bind_output(
                name=name,
                device_type="cuda",
                device_id=device_id,
                element_type=np_dtype,
                shape=tuple(sizes),
                buffer_ptr=out.data_ptr(),
            )
            outputs.append(out)
        return outputs


def _to_torch(torch: Any, value: Any, device: Any) -> Any:
    """An ``OrtValue`` that ONNX Runtime allocated on the device, as a torch tensor there.

    Through DLPack when this onnxruntime has it (torch then owns the very buffer), else
    through the host (numpy, so not for bfloat16 or float8).
    """
    if hasattr(value, "__dlpack__"):
        return torch.from_dlpack(value)
    return torch.from_numpy(value.numpy()).to(device)
