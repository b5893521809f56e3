"""Recurrent layers as one op each, so that the time axis stays dynamic.

``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` call ``torch._VF.lstm``/``gru``/``rnn_tanh``/
``rnn_relu``, whose ATen kernels loop over the time steps in C++: torch.export unrolls
the loop and specialises the sequence length to the example's. While
:func:`recurrent_ops` is active, those calls go to custom ops of this module instead
(``onnx_export::lstm``, ``onnx_export::gru``, ``onnx_export::rnn``): each runs the ATen
kernel eagerly, and traces as one node whose output shapes follow the input's, whatever
its length. ``ops/recurrent.py`` translates each to ONNX ``LSTM``/``GRU``/``RNN`` nodes
(one per layer), which run any length.

Only the forms ONNX's nodes compute are routed: float32 inputs, no LSTM projection
(``proj_size``), no dropout in training mode, unpacked sequences. Others keep torch's
own kernel (and its unrolled, fixed-length capture).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "recurrent_ops"]

_KERNELS = torch._C._VariableFunctions
#: What ONNX Runtime's LSTM, GRU and RNN kernels run ("LSTM operator does not support double").
_DTYPES = (torch.float32,)


@torch.library.custom_op("onnx_export::lstm", mutates_args=())
def lstm(
    input: Tensor,
    h0: Tensor,
    c0: Tensor,
    weights: list[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``torch._VF.lstm`` in eval mode: output, final hidden and cell states."""
    out, hn, cn = _KERNELS.lstm(
        input, (h0, c0), list(weights), has_biases, num_layers, 0.0, False, bidirectional,
        batch_first,
    )  # fmt: skip
    return out, hn, cn


@lstm.register_fake
def _lstm_fake(
    input: Tensor,
    h0: Tensor,
    c0: Tensor,
    weights: list[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    return _output_like(input, h0, bidirectional), h0.new_empty(h0.shape), c0.new_empty(c0.shape)


@torch.library.custom_op("onnx_export::gru", mutates_args=())
def gru(
    input: Tensor,
    h0: Tensor,
    weights: list[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Tensor]:
    """``torch._VF.gru`` in eval mode: output and final hidden state."""
    out, hn = _KERNELS.gru(
        input, h0, list(weights), has_biases, num_layers, 0.0, False, bidirectional, batch_first
    )
    return out, hn


@gru.register_fake
def _gru_fake(
    input: Tensor,
    h0: Tensor,
    weights: list[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Tensor]:
    return _output_like(input, h0, bidirectional), h0.new_empty(h0.shape)


@torch.library.custom_op("onnx_export::rnn", mutates_args=())
def rnn(
    input: Tensor,
    h0: Tensor,
    weights: list[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
    relu: bool,
) -> tuple[Tensor, Tensor]:
    """``torch._VF.rnn_tanh`` (or ``rnn_relu``) in eval mode: output and final hidden state."""
    kernel = _KERNELS.rnn_relu if relu else _KERNELS.rnn_tanh
    out, hn = kernel(
        input, h0, list(weights), has_biases, num_layers, 0.0, False, bidirectional, batch_first
    )
    return out, hn


@rnn.register_fake
def _rnn_fake(
    input: Tensor,
    h0: Tensor,
    weights: list[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
    relu: bool,
) -> tuple[Tensor, Tensor]:
    return _output_like(input, h0, bidirectional), h0.new_empty(h0.shape)


def _output_like(input: Tensor, h0: Tensor, bidirectional: bool) -> Tensor:
    hidden = h0.shape[-1] * (2 if bidirectional else 1)
    return input.new_empty((*input.shape[:2], hidden))


def _routable(input: Any, weights: Sequence[Any], dropout: float, train: bool) -> bool:
    """Whether ONNX's node computes this call: float32, unpacked, no dropout applied."""
    return (
        isinstance(input, Tensor)
        and input.dtype in _DTYPES
        and input.dim() == 3
        and not (train and dropout > 0)
        and all(isinstance(w, Tensor) and w.dtype == input.dtype for w in weights)
    )


def _routed_lstm(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        if len(args) != 9 or not isinstance(args[1], (tuple, list)):  # packed: batch_sizes
            return original(*args)
        input, (h0, c0), weights, bias, layers, dropout, train, bidirectional, batch_first = args
        per_layer = 4 if bias else 2
        projected = len(weights) != per_layer * layers * (2 if bidirectional else 1)
        if projected or not _routable(input, weights, dropout, train):
            return original(*args)
        return lstm(input, h0, c0, weights, bias, layers, bidirectional, batch_first)

    return call


def _routed_gru(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        if len(args) != 9 or not isinstance(args[1], Tensor) or isinstance(args[2], Tensor):
            return original(*args)  # packed: (data, batch_sizes, hx, ...)
        input, h0, weights, bias, layers, dropout, train, bidirectional, batch_first = args
        if not _routable(input, weights, dropout, train):
            return original(*args)
        return gru(input, h0, weights, bias, layers, bidirectional, batch_first)

    return call


def _routed_rnn(original: Callable[..., Any], relu: bool) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        if len(args) != 9 or not isinstance(args[1], Tensor) or isinstance(args[2], Tensor):
            return original(*args)
        input, h0, weights, bias, layers, dropout, train, bidirectional, batch_first = args
        if not _routable(input, weights, dropout, train):
            return original(*args)
        return rnn(input, h0, weights, bias, layers, bidirectional, batch_first, relu)

    return call


@contextlib.contextmanager
def recurrent_ops() -> Iterator[None]:
    """Route ``nn.LSTM``/``GRU``/``RNN`` to this module's ops for the block.

    Callers hold the export lock: ``torch._VF`` is patched for the process.
    """
    vf = torch._VF
    routes = {
        "lstm": _routed_lstm(_KERNELS.lstm),
        "gru": _routed_gru(_KERNELS.gru),
        "rnn_tanh": _routed_rnn(_KERNELS.rnn_tanh, relu=False),
        "rnn_relu": _routed_rnn(_KERNELS.rnn_relu, relu=True),
    }
    with swapped(*((vf, name, route) for name, route in routes.items())):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="rnn",
    targets=(
        Target("torch._C", "_VariableFunctions.lstm"),
        Target("torch._C", "_VariableFunctions.gru"),
        Target("torch._C", "_VariableFunctions.rnn_tanh"),
        Target("torch._C", "_VariableFunctions.rnn_relu"),
        Target("torch", "_VF"),
    ),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="torch.export unrolls nn.LSTM/GRU/RNN's time loop and fixes the sequence length",
    apply=lambda call: recurrent_ops(),
)
