"""A typed façade over ``onnxscript.opset18``: in our functions ``op.X(...)`` is an ``ir.Value``.

onnxscript types its ops with its own tensor classes; while the translator records, each
call appends a node and returns ``ir.Value`` objects (see ``translation/_recorder.py``). This
Protocol says so to mypy: each ONNX op the op library uses, with its inputs (positional:
values, Python numbers, ``None`` for an omitted optional input), its attributes
(keyword-only) and its outputs (one ``Tensor``, or a tuple when the op has several). It
was generated from
``onnx.defs`` (opset 18); ``tests/ops/test_opset_facade.py`` checks it against the schemas.
To use a new ONNX op, add its method here (same names as the ONNX schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias, cast

import onnx_ir as ir
from onnxscript import opset18

__all__ = ["Input", "Opset", "Tensor", "opset"]

#: What an op gives back while recording: a value of the graph being built.
Tensor: TypeAlias = ir.Value
#: What an op takes as an input: a graph value, a Python number (recorded as a constant),
#: or ``None`` for an omitted optional input.
Input: TypeAlias = ir.Value | float | None


class Opset(Protocol):
    """The ONNX ops (opset 18) that our own functions call, typed for recording."""

    def Abs(self, X: Input, /) -> Tensor: ...
    def Acos(self, input: Input, /) -> Tensor: ...
    def Add(self, A: Input, B: Input, /) -> Tensor: ...
    def And(self, A: Input, B: Input, /) -> Tensor: ...
    def ArgMax(
        self,
        data: Input,
        /,
        *,
        axis: int | None = None,
        keepdims: int | None = None,
        select_last_index: int | None = None,
    ) -> Tensor: ...
    def AveragePool(
        self,
        X: Input,
        /,
        *,
        auto_pad: str | None = None,
        ceil_mode: int | None = None,
        count_include_pad: int | None = None,
        kernel_shape: Sequence[int],
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> Tensor: ...
    def BatchNormalization(
        self,
        X: Input,
        scale: Input,
        B: Input,
        input_mean: Input,
        input_var: Input,
        /,
        *,
        epsilon: float | None = None,
        momentum: float | None = None,
        training_mode: int | None = None,
    ) -> Tensor: ...
    def Cast(self, input: Input, /, *, to: int) -> Tensor: ...
    def CastLike(self, input: Input, target_type: Input, /) -> Tensor: ...
    def Ceil(self, X: Input, /) -> Tensor: ...
    def Clip(self, input: Input, min: Input = None, max: Input = None, /) -> Tensor: ...
    def Compress(self, input: Input, condition: Input, /, *, axis: int | None = None) -> Tensor: ...
    def Concat(self, /, *inputs: Input, axis: int) -> Tensor: ...
    def Constant(
        self,
        /,
        *,
        sparse_value: object | None = None,
        value: ir.TensorProtocol | None = None,
        value_float: float | None = None,
        value_floats: Sequence[float] | None = None,
        value_int: int | None = None,
        value_ints: Sequence[int] | None = None,
        value_string: str | None = None,
        value_strings: Sequence[str] | None = None,
    ) -> Tensor: ...
    def ConstantOfShape(
        self, input: Input | Sequence[int | ir.Value], /, *, value: ir.TensorProtocol | None = None
    ) -> Tensor: ...
    def Conv(
        self,
        X: Input,
        W: Input,
        B: Input = None,
        /,
        *,
        auto_pad: str | None = None,
        dilations: Sequence[int] | None = None,
        group: int | None = None,
        kernel_shape: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> Tensor: ...
    def ConvTranspose(
        self,
        X: Input,
        W: Input,
        B: Input = None,
        /,
        *,
        auto_pad: str | None = None,
        dilations: Sequence[int] | None = None,
        group: int | None = None,
        kernel_shape: Sequence[int] | None = None,
        output_padding: Sequence[int] | None = None,
        output_shape: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> Tensor: ...
    def Cos(self, input: Input, /) -> Tensor: ...
    def CumSum(
        self, x: Input, axis: Input, /, *, exclusive: int | None = None, reverse: int | None = None
    ) -> Tensor: ...
    def DFT(
        self,
        input: Input,
        dft_length: Input = None,
        /,
        *,
        axis: int | None = None,
        inverse: int | None = None,
        onesided: int | None = None,
    ) -> Tensor: ...
    def Div(self, A: Input, B: Input, /) -> Tensor: ...
    def Einsum(self, /, *Inputs: Input, equation: str) -> Tensor: ...
    def Equal(self, A: Input, B: Input, /) -> Tensor: ...
    def Erf(self, input: Input, /) -> Tensor: ...
    def Exp(self, input: Input, /) -> Tensor: ...
    def Expand(self, input: Input, shape: Input, /) -> Tensor: ...
    def Floor(self, X: Input, /) -> Tensor: ...
    def Gather(self, data: Input, indices: Input, /, *, axis: int | None = None) -> Tensor: ...
    def GlobalAveragePool(self, X: Input, /) -> Tensor: ...
    def GatherElements(
        self, data: Input, indices: Input, /, *, axis: int | None = None
    ) -> Tensor: ...
    def GatherND(
        self, data: Input, indices: Input, /, *, batch_dims: int | None = None
    ) -> Tensor: ...
    def Greater(self, A: Input, B: Input, /) -> Tensor: ...
    def GreaterOrEqual(self, A: Input, B: Input, /) -> Tensor: ...
    def Identity(self, input: Input, /) -> Tensor: ...
    def IsInf(
        self, X: Input, /, *, detect_negative: int | None = None, detect_positive: int | None = None
    ) -> Tensor: ...
    def IsNaN(self, X: Input, /) -> Tensor: ...
    def Less(self, A: Input, B: Input, /) -> Tensor: ...
    def LessOrEqual(self, A: Input, B: Input, /) -> Tensor: ...
    def Log(self, input: Input, /) -> Tensor: ...
    def LogSoftmax(self, input: Input, /, *, axis: int | None = None) -> Tensor: ...
    def Loop(
        self, M: Input = None, cond: Input = None, /, *v_initial: Input, body: ir.Graph
    ) -> Tensor | Sequence[Tensor]: ...
    def MatMul(self, A: Input, B: Input, /) -> Tensor: ...
    def Max(self, /, *data_0: Input) -> Tensor: ...
    def Min(self, /, *data_0: Input) -> Tensor: ...
    def Mod(self, A: Input, B: Input, /, *, fmod: int | None = None) -> Tensor: ...
    def Mul(self, A: Input, B: Input, /) -> Tensor: ...
    def Neg(self, X: Input, /) -> Tensor: ...
    def NonZero(self, X: Input, /) -> Tensor: ...
    def Not(self, X: Input, /) -> Tensor: ...
    def OneHot(
        self, indices: Input, depth: Input, values: Input, /, *, axis: int | None = None
    ) -> Tensor: ...
    def Or(self, A: Input, B: Input, /) -> Tensor: ...
    def Pad(
        self,
        data: Input,
        pads: Input,
        constant_value: Input = None,
        axes: Input = None,
        /,
        *,
        mode: str | None = None,
    ) -> Tensor: ...
    def Pow(self, X: Input, Y: Input, /) -> Tensor: ...
    def RandomNormalLike(
        self,
        input: Input,
        /,
        *,
        dtype: int | None = None,
        mean: float | None = None,
        scale: float | None = None,
        seed: float | None = None,
    ) -> Tensor: ...
    def RandomUniformLike(
        self,
        input: Input,
        /,
        *,
        dtype: int | None = None,
        high: float | None = None,
        low: float | None = None,
        seed: float | None = None,
    ) -> Tensor: ...
    def Range(self, start: Input, limit: Input, delta: Input, /) -> Tensor: ...
    def Reciprocal(self, X: Input, /) -> Tensor: ...
    def ReduceL1(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceL2(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceMax(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceMean(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceMin(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceLogSumExp(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceProd(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def ReduceSum(
        self,
        data: Input,
        axes: Input = None,
        /,
        *,
        keepdims: int | None = None,
        noop_with_empty_axes: int | None = None,
    ) -> Tensor: ...
    def Reshape(self, data: Input, shape: Input, /, *, allowzero: int | None = None) -> Tensor: ...
    def Resize(
        self,
        X: Input,
        roi: Input = None,
        scales: Input = None,
        sizes: Input = None,
        /,
        *,
        antialias: int | None = None,
        axes: Sequence[int] | None = None,
        coordinate_transformation_mode: str | None = None,
        cubic_coeff_a: float | None = None,
        exclude_outside: int | None = None,
        extrapolation_value: float | None = None,
        keep_aspect_ratio_policy: str | None = None,
        mode: str | None = None,
        nearest_mode: str | None = None,
    ) -> Tensor: ...
    def Round(self, X: Input, /) -> Tensor: ...
    def Scan(
        self,
        /,
        *initial_state_and_scan_inputs: Input,
        body: ir.Graph,
        num_scan_inputs: int,
        scan_input_axes: Sequence[int] | None = None,
        scan_input_directions: Sequence[int] | None = None,
        scan_output_axes: Sequence[int] | None = None,
        scan_output_directions: Sequence[int] | None = None,
    ) -> Tensor | Sequence[Tensor]: ...
    def ScatterElements(
        self,
        data: Input,
        indices: Input,
        updates: Input,
        /,
        *,
        axis: int | None = None,
        reduction: str | None = None,
    ) -> Tensor: ...
    def Shape(
        self, data: Input, /, *, end: int | None = None, start: int | None = None
    ) -> Tensor: ...
    def Sign(self, input: Input, /) -> Tensor: ...
    def Sin(self, input: Input, /) -> Tensor: ...
    def Size(self, data: Input, /) -> Tensor: ...
    def Slice(
        self, data: Input, starts: Input, ends: Input, axes: Input = None, steps: Input = None, /
    ) -> Tensor: ...
    def Softmax(self, input: Input, /, *, axis: int | None = None) -> Tensor: ...
    def Softplus(self, X: Input, /) -> Tensor: ...
    def Sqrt(self, X: Input, /) -> Tensor: ...
    def Squeeze(self, data: Input, axes: Input = None, /) -> Tensor: ...
    def Sub(self, A: Input, B: Input, /) -> Tensor: ...
    def Tan(self, input: Input, /) -> Tensor: ...
    def TopK(
        self,
        X: Input,
        K: Input,
        /,
        *,
        axis: int | None = None,
        largest: int | None = None,
        sorted: int | None = None,
    ) -> tuple[Tensor, Tensor]: ...
    def Transpose(self, data: Input, /, *, perm: Sequence[int] | None = None) -> Tensor: ...
    def Trilu(self, input: Input, k: Input = None, /, *, upper: int | None = None) -> Tensor: ...
    def Unsqueeze(self, data: Input, axes: Input, /) -> Tensor: ...
    def Where(self, condition: Input, X: Input, Y: Input, /) -> Tensor: ...
    def Xor(self, A: Input, B: Input, /) -> Tensor: ...


#: ``onnxscript.opset18``, seen through :class:`Opset`.
opset: Opset = cast(Opset, opset18)
