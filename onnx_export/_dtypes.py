"""Mapping between torch dtypes and ONNX IR data types."""

from __future__ import annotations

import onnx_ir as ir
import torch

__all__ = ["to_ir_dtype", "to_torch_dtype", "value_dtype", "is_complex_value"]

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
}
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


def is_complex_value(val: object) -> bool:
    """Whether an FX ``meta["val"]`` is a complex tensor."""
    return isinstance(val, torch.Tensor) and val.is_complex()
