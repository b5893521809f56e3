"""Neural-network ops torchlib lacks or gets wrong (pooling is in ``pool``).

Batch norm in training mode (batch statistics and updated running statistics), padding
modes ONNX Runtime rejects (circular, negative edge), linear upsampling, ``im2col`` at any
batch size. Attention and losses are in ``attention``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_export.ops._common import (
    cast_to,
    const,
    empty,
    int64_1d,
    ints,
    known_rank,
    known_shape,
    op,
    output_dtype,
    unsupported,
)
from onnx_export.ops._registration import onnx_op
from onnx_export.ops.pool import expand_param

__all__ = [
    "aten_batch_norm",
    "aten_native_batch_norm",
    "aten_native_batch_norm_legit_functional",
    "aten_native_batch_norm_legit_no_stats",
    "aten_batch_norm_with_update_functional",
    "aten_pad",
    "aten_upsample_linear1d_vec",
    "aten_im2col",
    "aten_conv_transpose",
    "aten_conv_padding",
]

_FLOAT = ir.DataType.FLOAT


# -- batch norm --------------------------------------------------------------------------


def _channel_shape(x: ir.Value) -> list[int]:
    r = known_rank(x)
    if r < 2:
        raise unsupported("an input of rank >= 2 (batch, channels, ...)", f"rank {r}")
    return [1, -1] + [1] * (r - 2)


def _normalize(
    x: ir.Value,
    mean: ir.Value,
    invstd: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    shape: list[int],
) -> ir.Value:
    out = op.Mul(op.Sub(x, op.Reshape(mean, ints(shape))), op.Reshape(invstd, ints(shape)))
    if weight is not None:
        out = op.Mul(out, op.Reshape(op.CastLike(weight, out), ints(shape)))
    if bias is not None:
        out = op.Add(out, op.Reshape(op.CastLike(bias, out), ints(shape)))
    return out


def _batch_statistics(x: ir.Value, r: int) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Mean, biased variance and element count per channel (axis 1)."""
    axes = ints([0, *range(2, r)])
    mean = op.ReduceMean(x, axes, keepdims=0)
    centered = op.Sub(x, op.Reshape(mean, ints([1, -1] + [1] * (r - 2))))
    variance = op.ReduceMean(op.Mul(centered, centered), axes, keepdims=0)
    count = op.Div(op.CastLike(op.Size(x), x), op.CastLike(op.Shape(x, start=1, end=2), x))
    return mean, variance, count


def _batch_norm(
    input: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    running_mean: ir.Value | None,
    running_var: ir.Value | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value | None, ir.Value | None]:
    """(output, mean, invstd, new running mean, new running var), computed in float32+."""
    r = known_rank(input)
    shape = _channel_shape(input)
    x = (
        cast_to(input, _FLOAT)
        if input.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
        else input
    )
    if training or running_mean is None:
        mean, variance, count = _batch_statistics(x, r)
        invstd = op.Reciprocal(op.Sqrt(op.Add(variance, const(eps, x))))
        new_mean, new_var = running_mean, running_var
        if running_mean is not None and running_var is not None:
            keep = const(1.0 - momentum, x)
            step = const(momentum, x)
            unbiased = op.Div(
                op.Mul(variance, count), op.Max(op.Sub(count, const(1.0, x)), const(1.0, x))
            )
            new_mean = op.Add(op.Mul(keep, op.CastLike(running_mean, x)), op.Mul(step, mean))
            new_var = op.Add(op.Mul(keep, op.CastLike(running_var, x)), op.Mul(step, unbiased))
    else:
        mean = op.CastLike(running_mean, x)
        invstd = op.Reciprocal(op.Sqrt(op.Add(op.CastLike(running_var, x), const(eps, x))))
        new_mean, new_var = running_mean, running_var
    out = cast_to(_normalize(x, mean, invstd, weight, bias, shape), input.dtype)
    return out, mean, invstd, new_mean, new_var


@onnx_op("aten::batch_norm")
def aten_batch_norm(
    input: ir.Value,
    weight: Any = None,
    bias: Any = None,
    running_mean: Any = None,
    running_var: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
) -> ir.Value:
    """batch_norm(Tensor input, Tensor? weight, ..., bool training, ...) -> Tensor.

    With running statistics in eval mode: ONNX ``BatchNormalization`` (which ONNX Runtime
    folds into a preceding convolution); otherwise the batch statistics, computed here.
    """
    if not training and running_mean is not None and running_var is not None:
        return _inference_batch_norm(input, weight, bias, running_mean, running_var, eps)
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)[0]


def _inference_batch_norm(
    x: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    mean: ir.Value | None,
    var: ir.Value | None,
    eps: float,
) -> ir.Value:
    channels = op.Shape(x, start=1, end=2)
    scale = op.CastLike(weight, x) if weight is not None else op.Expand(const(1.0, x), channels)
    shift = op.CastLike(bias, x) if bias is not None else op.Expand(const(0.0, x), channels)
    return op.BatchNormalization(
        x, scale, shift, op.CastLike(mean, x), op.CastLike(var, x), epsilon=float(eps)
    )


@onnx_op("aten::native_batch_norm")
def aten_native_batch_norm(
    input: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    running_mean: ir.Value | None,
    running_var: ir.Value | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """native_batch_norm(...) -> (Tensor, Tensor save_mean, Tensor save_invstd)."""
    out, mean, invstd, _, _ = _batch_norm(
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if not training and running_mean is not None:
        return out, empty(output_dtype(1, input.dtype)), empty(output_dtype(2, input.dtype))
    return out, cast_to(mean, output_dtype(1, None)), cast_to(invstd, output_dtype(2, None))


@onnx_op("aten::_native_batch_norm_legit_functional")
def aten_native_batch_norm_legit_functional(
    input: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    running_mean: ir.Value,
    running_var: ir.Value,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value]:
    """_native_batch_norm_legit_functional(...) -> (out, mean, rstd, running_mean, running_var)."""
    out, mean, invstd, new_mean, new_var = _batch_norm(
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if not training:
        mean, invstd = empty(output_dtype(1, input.dtype)), empty(output_dtype(2, input.dtype))
    return (
        out,
        cast_to(mean, output_dtype(1, None)),
        cast_to(invstd, output_dtype(2, None)),
        cast_to(running_mean if new_mean is None else new_mean, output_dtype(3, None)),
        cast_to(running_var if new_var is None else new_var, output_dtype(4, None)),
    )


@onnx_op("aten::_native_batch_norm_legit.no_stats")
def aten_native_batch_norm_legit_no_stats(
    input: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """_native_batch_norm_legit.no_stats(...) -> (out, mean, rstd): batch statistics."""
    out, mean, invstd, _, _ = _batch_norm(input, weight, bias, None, None, True, momentum, eps)
    return out, cast_to(mean, output_dtype(1, None)), cast_to(invstd, output_dtype(2, None))


@onnx_op("aten::_batch_norm_with_update_functional")
def aten_batch_norm_with_update_functional(
    input: ir.Value,
    weight: ir.Value | None,
    bias: ir.Value | None,
    running_mean: ir.Value,
    running_var: ir.Value,
    momentum: float,
    eps: float,
) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value]:
    """_batch_norm_with_update_functional(...) -> (out, mean, rstd, reserve, rm, rv)."""
    out, mean, invstd, new_mean, new_var = _batch_norm(
        input, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return (
        out,
        cast_to(mean, output_dtype(1, None)),
        cast_to(invstd, output_dtype(2, None)),
        empty(output_dtype(3, ir.DataType.UINT8)),
        cast_to(running_mean if new_mean is None else new_mean, output_dtype(4, None)),
        cast_to(running_var if new_var is None else new_var, output_dtype(5, None)),
    )


# -- average pooling ---------------------------------------------------------------------


# -- adaptive pooling --------------------------------------------------------------------


# -- padding -----------------------------------------------------------------------------


def _static_amount(amount: Any) -> int | None:
    """A pad amount as an int when it is one (or a constant), None when it is symbolic."""
    if isinstance(amount, ir.Value):
        tensor = amount.const_value
        return int(tensor.numpy().reshape(-1)[0]) if tensor is not None else None
    return int(amount)


def _static_pads(pad: Sequence[Any]) -> list[int] | None:
    amounts = [_static_amount(p) for p in pad]
    return None if any(a is None for a in amounts) else amounts  # type: ignore[return-value]


def _crop_negative(x: ir.Value, pad: Sequence[int], r: int) -> tuple[Any, list[int]]:
    """Slice away negative pads; return the rest as ONNX pads (begins, then ends)."""
    begins, ends = [0] * r, [0] * r
    starts, stops, axes = [], [], []
    for i in range(len(pad) // 2):
        axis = r - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        if left < 0 or right < 0:
            starts.append(max(0, -left))
            stops.append(right if right < 0 else 2**62)
            axes.append(axis)
        begins[axis], ends[axis] = max(0, left), max(0, right)
    if axes:
        x = op.Slice(x, ints(starts), ints(stops), ints(axes))
    return x, begins + ends


def _crop_symbolic(x: ir.Value, pad: Sequence[Any], r: int) -> tuple[ir.Value, ir.Value]:
    """``_crop_negative`` for symbolic amounts: the ONNX pads are a computed INT64 tensor."""
    zero, big = ints([0]), ints([2**62])
    begins: list[ir.Value] = [zero] * r
    ends: list[ir.Value] = [zero] * r
    starts, stops = [], []
    axes = [r - 1 - i for i in range(len(pad) // 2)]
    for i, axis in enumerate(axes):
        left, right = int64_1d(pad[2 * i]), int64_1d(pad[2 * i + 1])
        starts.append(op.Max(op.Neg(left), zero))
        stops.append(op.Where(op.Less(right, zero), right, big))
        begins[axis], ends[axis] = op.Max(left, zero), op.Max(right, zero)
    if axes:
        x = op.Slice(x, op.Concat(*starts, axis=0), op.Concat(*stops, axis=0), ints(axes))
    return x, op.Concat(*begins, *ends, axis=0)


def _circular(x: ir.Value, pad: Sequence[Any], r: int) -> ir.Value:
    """Wrap-around padding: the tail before, the head after (negative amounts crop)."""
    zero, big = ints([0]), ints([2**62])
    for i in range(len(pad) // 2):
        axis = r - 1 - i
        left_static, right_static = _static_amount(pad[2 * i]), _static_amount(pad[2 * i + 1])
        if left_static == 0 and right_static == 0:
            continue
        left, right = int64_1d(pad[2 * i]), int64_1d(pad[2 * i + 1])
        size = op.Shape(x, start=axis, end=axis + 1)
        axes = ints([axis])
        parts = []
        if left_static is None or left_static > 0:  # the last `left` items (none if <= 0)
            parts.append(op.Slice(x, op.Sub(size, op.Max(left, zero)), big, axes))
        stop = op.Where(op.Less(right, zero), right, big)
        parts.append(op.Slice(x, op.Max(op.Neg(left), zero), stop, axes))
        if right_static is None or right_static > 0:  # the first `right` items
            parts.append(op.Slice(x, zero, op.Max(right, zero), axes))
        x = op.Concat(*parts, axis=axis) if len(parts) > 1 else parts[0]
    return x


def _replicate(x: ir.Value, pad: Sequence[Any], r: int) -> ir.Value:
    """Edge padding as a gather of clamped indices (negative pads crop, as in torch)."""
    for i in range(len(pad) // 2):
        axis = r - 1 - i
        if _static_amount(pad[2 * i]) == 0 and _static_amount(pad[2 * i + 1]) == 0:
            continue
        left = op.Reshape(int64_1d(pad[2 * i]), ints([]))
        right = op.Reshape(int64_1d(pad[2 * i + 1]), ints([]))
        size = op.Reshape(op.Shape(x, start=axis, end=axis + 1), ints([]))
        positions = op.Range(op.Neg(left), op.Add(size, right), op.Constant(value_int=1))
        last = op.Sub(size, op.Constant(value_int=1))
        clamped = op.Min(op.Max(positions, op.Constant(value_int=0)), last)
        x = op.Gather(x, clamped, axis=axis)
    return x


@onnx_op("aten::pad")
def aten_pad(
    self: ir.Value, pad: Sequence[Any], mode: str = "constant", value: float | None = None
) -> ir.Value:
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor.

    Amounts may be symbolic (``F.pad(x, (0, 0, 0, x.shape[2]))``, padding to a multiple
    of 32 of a dynamic size); negative amounts crop, in every mode.
    """
    r = known_rank(self)
    if mode == "circular":
        return _circular(self, pad, r)
    if mode == "replicate":
        return _replicate(self, pad, r)
    onnx_mode = {"constant": "constant", "reflect": "reflect"}.get(mode)
    if onnx_mode is None:
        raise unsupported("mode constant, reflect, replicate or circular", repr(mode))
    static = _static_pads(pad)
    pads: Any
    if static is not None:
        cropped, onnx_pads = _crop_negative(self, static, r)
        if not any(onnx_pads):
            return op.Identity(cropped)
        pads = ints(onnx_pads)
    else:
        cropped, pads = _crop_symbolic(self, pad, r)
    if onnx_mode == "constant":
        fill = const(0 if value is None else value, self)
        return op.Pad(cropped, pads, fill, mode="constant")
    return op.Pad(cropped, pads, mode=onnx_mode)


# -- attention, losses, upsampling -------------------------------------------------------


@onnx_op("aten::upsample_linear1d.vec")
def aten_upsample_linear1d_vec(
    input: ir.Value,
    output_size: Sequence[Any] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> ir.Value:
    """upsample_linear1d.vec(Tensor input, SymInt[]? output_size, bool align_corners, ...)."""
    mode = "align_corners" if align_corners else "pytorch_half_pixel"
    if output_size:
        sizes = op.Concat(
            op.Shape(input, start=0, end=-1),
            op.Reshape(
                op.Cast(output_size[0], to=7)
                if isinstance(output_size[0], ir.Value)
                else ints([int(output_size[0])]),
                ints([1]),
            ),
            axis=0,
        )
        return op.Resize(
            input, None, None, sizes, mode="linear", coordinate_transformation_mode=mode
        )
    if not scale_factors:
        raise unsupported("output_size or scale_factors", "neither", "pass one of them")
    scales = op.Constant(
        value=ir.tensor(np.array([1.0, 1.0, float(scale_factors[0])], dtype=np.float32))
    )
    return op.Resize(input, None, scales, mode="linear", coordinate_transformation_mode=mode)


@onnx_op("aten::im2col")
def aten_im2col(
    self: ir.Value,
    kernel_size: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
) -> ir.Value:
    """im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride).

    One strided slice per kernel position, stacked; any batch size (zero included), any
    (symbolic) height and width, batched or not.
    """
    r = known_rank(self)
    kh, kw = expand_param(kernel_size, 2, [])
    dh, dw = expand_param(dilation, 2, [1, 1])
    ph, pw = expand_param(padding, 2, [0, 0])
    sh, sw = expand_param(stride, 2, [1, 1])
    lead = r - 2
    padded = op.Pad(self, ints([0] * lead + [ph, pw] + [0] * lead + [ph, pw]))
    # The last window's start along each axis: ((size + 2p - d(k-1) - 1) // s) * s.
    spans = op.Sub(op.Shape(padded, start=-2), ints([dh * (kh - 1) + 1, dw * (kw - 1) + 1]))
    last = op.Mul(op.Div(spans, ints([sh, sw])), ints([sh, sw]))
    patches = []
    for i in range(kh):
        for j in range(kw):
            starts = ints([i * dh, j * dw])
            ends = op.Add(last, ints([i * dh + 1, j * dw + 1]))
            window = op.Slice(padded, starts, ends, ints([-2, -1]), ints([sh, sw]))
            patches.append(op.Unsqueeze(window, ints([lead])))
    stacked = op.Concat(*patches, axis=lead)  # [..., C, kh*kw, out_h, out_w] with C at lead-1
    blocks = op.Mul(op.Shape(stacked, start=-2, end=-1), op.Shape(stacked, start=-1))
    channels = known_shape(self)[lead - 1] if lead >= 1 else 1
    rows = ints([channels * kh * kw if isinstance(channels, int) else -1])  # -1: empty batch
    if lead >= 2:
        batch = op.Shape(self, start=0, end=lead - 1)
        return op.Reshape(stacked, op.Concat(batch, rows, blocks, axis=0))
    return op.Reshape(stacked, op.Concat(rows, blocks, axis=0))


def _with_batch(input: ir.Value, weight: ir.Value) -> tuple[int, bool, ir.Value]:
    """A convolution's spatial rank, whether ``input`` is batched, and ``input`` batched.

    An unbatched input gets a batch axis for the node; the caller drops it after.
    """
    spatial = known_rank(weight, "the weight") - 2
    batched = known_rank(input) == spatial + 2
    return spatial, batched, input if batched else op.Unsqueeze(input, ints([0]))


@onnx_op("aten::conv_transpose1d", "aten::conv_transpose2d.input", "aten::conv_transpose3d.input")
def aten_conv_transpose(
    input: ir.Value,
    weight: ir.Value,
    bias: ir.Value | None = None,
    stride: Sequence[int] | int = 1,
    padding: Sequence[int] | int = 0,
    output_padding: Sequence[int] | int = 0,
    groups: int = 1,
    dilation: Sequence[int] | int = 1,
) -> ir.Value:
    """conv_transpose{1,2,3}d(input, weight, bias, stride, padding, ...): one ``ConvTranspose``.

    torch.export keeps these ops whole (a MONAI 3-D UNet's up path); decomposing them
    traced each node again at every export. An unbatched input (no batch axis) gets one
    for the node and loses it after.
    """
    spatial, batched, x = _with_batch(input, weight)
    pads = expand_param(padding, spatial, [0] * spatial)
    inputs = [x, weight] if bias is None else [x, weight, bias]
    result = op.ConvTranspose(
        *inputs,
        strides=expand_param(stride, spatial, [1] * spatial),
        pads=pads + pads,
        output_padding=expand_param(output_padding, spatial, [0] * spatial),
        dilations=expand_param(dilation, spatial, [1] * spatial),
        group=groups,
    )
    return result if batched else op.Squeeze(result, ints([0]))


@onnx_op("aten::conv1d.padding", "aten::conv2d.padding", "aten::conv3d.padding")
def aten_conv_padding(
    input: ir.Value,
    weight: ir.Value,
    bias: ir.Value | None = None,
    stride: Sequence[int] | int = 1,
    padding: str = "valid",
    dilation: Sequence[int] | int = 1,
    groups: int = 1,
) -> ir.Value:
    """conv{1,2,3}d.padding(input, weight, bias, stride, str padding, ...): one ``Conv``.

    ``padding="same"`` pads ``dilation * (kernel - 1)`` per axis, the odd one at the end (as
    torch does); ``"valid"`` pads nothing. torch.export keeps these overloads whole
    (ConvMixer, audio front ends); decomposing them traced each node again, or, with
    dynamic shapes, the whole program.
    """
    spatial, batched, x = _with_batch(input, weight)
    dilations = expand_param(dilation, spatial, [1] * spatial)
    if padding == "valid":
        pads = [0] * (2 * spatial)
    elif padding == "same":
        dims = list(known_shape(weight, "the weight"))[2:]
        kernel = [k for k in dims if isinstance(k, int)]
        if len(kernel) != len(dims):
            raise unsupported("a weight of static kernel size", f"kernel {dims}")
        total = [d * (k - 1) for d, k in zip(dilations, kernel, strict=True)]
        pads = [t // 2 for t in total] + [t - t // 2 for t in total]
    else:
        raise unsupported('padding "same" or "valid"', f"padding={padding!r}")
    inputs = [x, weight] if bias is None else [x, weight, bias]
    result = op.Conv(
        *inputs,
        strides=expand_param(stride, spatial, [1] * spatial),
        pads=pads,
        dilations=dilations,
        group=groups,
    )
    return result if batched else op.Squeeze(result, ints([0]))
