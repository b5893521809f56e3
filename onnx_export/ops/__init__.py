"""onnx-export's own ONNX functions for ATen ops, grouped by topic like torchlib's ``ops/``.

Importing this package imports every topic module; each registers its functions with
``@onnx_op`` (``ops/_registration.py``) where they are defined. The registry consults them
after the user's functions and before torchlib's.
"""

from onnx_export.ops import (
    adaptive_pool,
    attention,
    bessel,
    complex,
    complex_scalars,
    core,
    fft,
    gamma,
    histogram,
    integer_sum,
    linalg,
    math,
    nn,
    opset20,
    opset21,
    opset23,
    polynomial,
    pool,
    ranges,
    recurrent,
    reduce,
    roll,
    scatter,
    sizes,
    spectral,
    tensor,
)

__all__ = [
    "adaptive_pool",
    "attention",
    "bessel",
    "complex",
    "complex_scalars",
    "core",
    "fft",
    "gamma",
    "histogram",
    "integer_sum",
    "linalg",
    "math",
    "nn",
    "opset20",
    "opset21",
    "opset23",
    "polynomial",
    "pool",
    "ranges",
    "recurrent",
    "reduce",
    "roll",
    "scatter",
    "sizes",
    "spectral",
    "tensor",
]
