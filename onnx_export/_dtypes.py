"""Mapping between torch dtypes and ONNX IR data types."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
import torch

__all__ = [
    "to_ir_dtype",
    "to_torch_dtype",
    "value_dtype",
    "is_complex_value",
    "onnx_dims",
    "PACKED_X2",
    "float4_initializer",
]

_TORCH_TO_IR: dict[torch.dtype, ir.DataType] = {
    torch.float32: ir.DataType.FLOAT,
    torch.float64: ir.DataType.DOUBLE,
    torch.float16: ir.DataType.FLOAT16,
    torch.bfloat16: ir.DataType.BFLOAT16,
    torch.int8: ir.DataType.INT8,
    torch.int16: ir.DataType.INT16,
    torch.int32: ir.DataType.INT32,
    torch.int64: ir.DataType.INT64,
    torch.uint8: ir.DataType.UINT8,
    torch.uint16: ir.DataType.UINT16,
    torch.uint32: ir.DataType.UINT32,
    torch.uint64: ir.DataType.UINT64,
    torch.bool: ir.DataType.BOOL,
    torch.complex64: ir.DataType.COMPLEX64,
    torch.complex128: ir.DataType.COMPLEX128,
    torch.float8_e4m3fn: ir.DataType.FLOAT8E4M3FN,
    torch.float8_e4m3fnuz: ir.DataType.FLOAT8E4M3FNUZ,
    torch.float8_e5m2: ir.DataType.FLOAT8E5M2,
    torch.float8_e5m2fnuz: ir.DataType.FLOAT8E5M2FNUZ,
    torch.float4_e2m1fn_x2: ir.DataType.FLOAT4E2M1,  # two values a byte: see onnx_dims
}
PACKED_X2 = frozenset({torch.float4_e2m1fn_x2})
"""torch dtypes with two values per element (byte); ONNX counts each value in the shape."""
_IR_TO_TORCH = {v: k for k, v in _TORCH_TO_IR.items()}
_COMPLEX_TO_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def to_ir_dtype(dtype: torch.dtype) -> ir.DataType:
    """The ONNX data type of a torch dtype (``ValueError`` when ONNX has none)."""
    try:
        return _TORCH_TO_IR[dtype]
    except KeyError:
        raise ValueError(f"torch dtype {dtype} has no ONNX equivalent.") from None


def to_torch_dtype(dtype: ir.DataType) -> torch.dtype:
    """The torch dtype of an ONNX data type."""
    return _IR_TO_TORCH[dtype]


def value_dtype(val: object) -> ir.DataType | None:
    """The ONNX dtype that an FX ``meta["val"]`` takes in the graph (complex as its real view)."""
    if isinstance(val, torch.Tensor):
        return to_ir_dtype(_COMPLEX_TO_REAL.get(val.dtype, val.dtype))
    if isinstance(val, (torch.SymBool, bool)):
        return ir.DataType.BOOL
    if isinstance(val, (torch.SymInt, int)):
        return ir.DataType.INT64
    if isinstance(val, (torch.SymFloat, float)):
        return ir.DataType.FLOAT
    return None


def onnx_dims(dtype: torch.dtype, dims: Sequence[int | str]) -> list[int | str]:
    """The ONNX shape of a torch tensor of ``dtype`` and shape ``dims``.

    A ``float4_e2m1fn_x2`` element packs two FLOAT4E2M1 values and ONNX's shape counts
    values, so the last axis doubles: torch ``[3, 4]`` is ONNX ``[3, 8]``.
    """
    if dtype not in PACKED_X2 or not dims:
        return list(dims)
    *rest, last = dims
    return [*rest, last * 2 if isinstance(last, int) else f"2*({last})"]


def float4_initializer(tensor: torch.Tensor, name: str | None = None) -> ir.TensorProtocol:
    """A ``float4_e2m1fn_x2`` tensor as ONNX FLOAT4E2M1 data, one value per element.

    torch keeps the first of each pair in the low four bits, as ONNX stores them; the
    values are unpacked (a copy) and onnx_ir packs them again when it writes the model.
    """
    import ml_dtypes

    packed = tensor.detach().cpu().contiguous().view(torch.uint8).numpy()
    values = np.stack([packed & 0x0F, packed >> 4], axis=-1)
    shape = onnx_dims(tensor.dtype, list(tensor.shape))
    unpacked = values.reshape([int(d) for d in shape]).view(ml_dtypes.float4_e2m1fn)
    return ir.Tensor(unpacked, dtype=ir.DataType.FLOAT4E2M1, name=name)


def is_complex_value(val: object) -> bool:
    """Whether an FX ``meta["val"]`` is a complex tensor."""
    return isinstance(val, torch.Tensor) and val.is_complex()
