"""SymInt and SymFloat operands in ATen ``Scalar`` parameters (issue #38).

``idx % (h * w)`` with dynamic ``h`` and ``w`` gives ``aten.remainder.Scalar`` a symbolic
value, which torchlib's function took as a Python number. Two kinds of test:

- the forms users write (``%``, ``//``, ``**``, shifts, comparisons, ``clamp``, ``where``,
  ``full``, ``arange``...), each exported with dynamic dims and run in ONNX Runtime against
  eager at the example and at two other sizes;
- a sweep over every ATen overload with a ``Scalar`` parameter that has an ONNX function
  (torchlib's or ours), fed a SymInt: it would have caught ``%``, and catches the next one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")

aten = torch.ops.aten


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> Any:
        return self.fn(x, idx)


def _half(x: torch.Tensor) -> Any:
    """A SymFloat: half of the first dynamic size."""
    return torch.sym_float(x.shape[0]) * 0.5


#: name -> (forward body, an ATen overload the graph must hold for the case to test it)
CASES: dict[str, tuple[Callable[..., Any], Any]] = {
    "detector_decode_mod": (lambda x, i: i % (x.shape[0] * x.shape[1]), aten.remainder.Scalar),
    "mod_negative": (lambda x, i: (i - 20) % x.shape[0], aten.remainder.Scalar),
    "float_mod_symint": (lambda x, i: x % x.shape[0], aten.remainder.Scalar),
    "float_mod_symfloat": (lambda x, i: x % _half(x), aten.remainder.Scalar),
    "symint_mod_tensor": (lambda x, i: x.shape[0] % (i + 1), aten.remainder.Scalar_Tensor),
    "fmod": (lambda x, i: torch.fmod(i - 20, x.shape[0]), aten.fmod.Scalar),
    "fmod_symfloat": (lambda x, i: torch.fmod(x, _half(x)), aten.fmod.Scalar),
    "floordiv": (lambda x, i: i // x.shape[0], aten.floor_divide.default),
    "float_floor_divide": (lambda x, i: torch.floor_divide(x, x.shape[0]), None),
    "symint_floordiv_tensor": (lambda x, i: x.shape[0] // (i + 1), aten.floor_divide.default),
    "pow_float": (lambda x, i: x ** x.shape[1], aten.pow.Tensor_Scalar),
    "pow_int": (lambda x, i: i ** (x.shape[1] - 2), aten.pow.Tensor_Scalar),
    "pow_symfloat": (lambda x, i: x.abs() ** _half(x), aten.pow.Tensor_Scalar),
    "symint_pow_tensor": (lambda x, i: x.shape[1] ** x, aten.pow.Scalar),
    "and": (lambda x, i: i & x.shape[0], aten.bitwise_and.Scalar),
    "or": (lambda x, i: i | x.shape[0], aten.bitwise_or.Scalar),
    "xor": (lambda x, i: i ^ x.shape[0], aten.bitwise_xor.Scalar),
    "lshift": (lambda x, i: i << (x.shape[0] - 4), aten.__lshift__.Scalar),
    "rshift": (lambda x, i: (i * 64) >> (x.shape[0] - 4), aten.__rshift__.Scalar),
    "left_shift": (
        lambda x, i: torch.bitwise_left_shift(i, x.shape[1] - 3),
        aten.bitwise_left_shift.Tensor_Scalar,
    ),
    "eq": (lambda x, i: i == x.shape[0], aten.eq.Scalar),
    "ne": (lambda x, i: i != x.shape[0], aten.ne.Scalar),
    "lt": (lambda x, i: i < x.shape[0], aten.lt.Scalar),
    "le": (lambda x, i: i <= x.shape[0], aten.le.Scalar),
    "gt_symfloat": (lambda x, i: x > _half(x) - 3, aten.gt.Scalar),
    "ge": (lambda x, i: i >= x.shape[0], aten.ge.Scalar),
    "clamp": (lambda x, i: torch.clamp(i, x.shape[1], x.shape[0]), aten.clamp.default),
    "clamp_symfloat": (lambda x, i: torch.clamp(x, -_half(x), _half(x)), aten.clamp.default),
    "clamp_min": (lambda x, i: torch.clamp_min(i, x.shape[0]), aten.clamp_min.default),
    "clamp_max": (lambda x, i: torch.clamp_max(i, x.shape[0]), aten.clamp_max.default),
    "where_other": (lambda x, i: torch.where(i > 3, i, x.shape[0]), aten.where.ScalarOther),
    "where_self": (lambda x, i: torch.where(i > 3, x.shape[0], i), aten.where.ScalarSelf),
    "where_both": (lambda x, i: torch.where(i > 3, x.shape[0], x.shape[1]), aten.where.Scalar),
    "where_symfloat": (lambda x, i: torch.where(x > 0, x, _half(x)), aten.where.ScalarOther),
    "threshold": (
        lambda x, i: nn.functional.threshold(x, _half(x) * 0.1, x.shape[0]),
        aten.threshold.default,
    ),
    "full": (lambda x, i: torch.full((x.shape[0], 2), x.shape[1]), aten.full.default),
    "full_symfloat": (lambda x, i: torch.full((3,), _half(x)), aten.full.default),
    "full_like": (lambda x, i: torch.full_like(i, x.shape[0]), aten.full_like.default),
    "full_like_symfloat": (lambda x, i: torch.full_like(x, _half(x)), aten.full_like.default),
    "new_full": (lambda x, i: x.new_full((2,), x.shape[0]), aten.new_full.default),
    "arange_end": (lambda x, i: torch.arange(x.shape[0]), aten.arange.default),
    "arange_start": (lambda x, i: torch.arange(x.shape[1], x.shape[0] + 5), aten.arange.start),
    "arange_step": (lambda x, i: torch.arange(0, 40, x.shape[1]), aten.arange.start_step),
    "arange_all": (
        lambda x, i: torch.arange(x.shape[1] - 3, x.shape[0] * 4, x.shape[1]),
        aten.arange.start_step,
    ),
    "arange_symfloat": (lambda x, i: torch.arange(0.0, _half(x), 0.5), aten.arange.start_step),
    "mul": (lambda x, i: x * x.shape[0], aten.mul.Tensor),
    "mul_scalar": (lambda x, i: aten.mul.Scalar(i, x.shape[0]), aten.mul.Scalar),
    "mul_symfloat": (lambda x, i: i * _half(x), aten.mul.Tensor),
    "add_scalar": (lambda x, i: aten.add.Scalar(i, x.shape[0]), aten.add.Scalar),
    "sub_scalar": (lambda x, i: aten.sub.Scalar(i, x.shape[0]), aten.sub.Scalar),
    "div_scalar": (lambda x, i: aten.div.Scalar(i, x.shape[0]), aten.div.Scalar),
    "div_floor": (
        lambda x, i: torch.div(i - 20, x.shape[0], rounding_mode="floor"),
        aten.div.Tensor_mode,
    ),
    "div_trunc": (
        lambda x, i: torch.div(i - 20, x.shape[0], rounding_mode="trunc"),
        aten.div.Tensor_mode,
    ),
    "rsub": (lambda x, i: x.shape[0] - i, aten.rsub.Scalar),
    "add_alpha": (lambda x, i: torch.add(i, i, alpha=x.shape[0]), aten.add.Tensor),
    "masked_fill": (lambda x, i: i.masked_fill(i > 5, x.shape[0]), aten.masked_fill.Scalar),
}

_DYNAMIC = {"x": {0: "n", 1: "m"}, "idx": {0: "k"}}
_SIZES = ((7, 5, 30), (9, 4, 25), (6, 6, 31))


def _inputs(n: int, m: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, m), torch.arange(k)


@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_scalar_operand_at_three_sizes(name: str) -> None:
    fn, overload = CASES[name]
    model = Fn(fn)
    options = onnx_export.ExportOptions(dynamic_shapes=_DYNAMIC)
    program = onnx_export.dynamo_export(model, *_inputs(*_SIZES[0]), export_options=options)
    if overload is not None:
        targets = {n.target for n in program.exported_program.graph.nodes}
        assert overload in targets, f"the graph lacks {overload}: the case does not test it"
    for sizes in _SIZES:
        assert_onnx_program_close(program, model, *_inputs(*sizes))


# -- the sweep ---------------------------------------------------------------------------


@functools.cache
def _scalar_overloads() -> tuple[str, ...]:
    """Keys of every ATen overload with an ONNX function and a ``Scalar`` parameter whose
    required parameters are all tensors or scalars."""
    import onnxscript.function_libs.torch_lib.ops  # noqa: F401  (registers torchlib)
    from onnxscript.function_libs.torch_lib.registration import default_registry

    import onnx_export.ops  # noqa: F401  (registers ours)
    from onnx_export.ops._registration import registered_ops

    keys = {k for k, _ in default_registry.items()} | {o.target for o in registered_ops()}
    found = []
    for key in sorted(k for k in keys if k.startswith("aten::")):
        kinds = _kinds(key)
        if kinds and "S" in kinds and "T" in kinds:
            found.append(key)
    return tuple(found)


def _overload(key: str) -> Any:
    packet, _, name = key[len("aten::") :].partition(".")
    return getattr(getattr(aten, packet, None), name or "default", None)


def _kinds(key: str) -> str:
    """``T`` for each leading tensor parameter, ``S`` for each scalar (``""``: not callable so)."""
    overload = _overload(key)
    if overload is None:
        return ""
    kinds = ""
    for formal in overload._schema.arguments:
        if isinstance(formal.type, torch.NumberType):
            kinds += "S"
        elif isinstance(formal.type, torch.TensorType):
            kinds += "T"
        elif formal.has_default_value() or isinstance(formal.type, torch.OptionalType):
            break
        else:
            return ""
    return kinds


#: Keys whose functions take the symbolic value as a constant ONNX attribute and have no
#: Tensor overload to go to; the export refuses them with a message that says so.
TAKES_A_CONSTANT = {
    "aten::addcdiv": "value is an attribute",
    "aten::addcmul": "value is an attribute",
    "aten::celu": "alpha is an attribute",
    "aten::elu": "alpha, scale and input_scale are attributes",
    "aten::hardtanh": "min_val and max_val are attributes",
    "aten::leaky_relu": "negative_slope is an attribute",
    "aten::softplus": "beta and threshold are attributes",
    "aten::rrelu_with_noise_functional": "lower and upper are attributes",
    "aten::linalg_vector_norm": "ord is an attribute",
    "aten::dist": "p is an attribute",
}

#: Keys the sweep cannot call generically, and why.
NOT_SWEPT = {
    "aten::bucketize.Scalar": "returns a 0-D index, not elementwise",
    "aten::searchsorted.Scalar": "needs a sorted 1-D boundaries tensor",
    "aten::fill.Scalar": "torch.export turns it into full_like (tested above)",
}


def _call_for(key: str, dtype: torch.dtype) -> Callable[[torch.Tensor], Any]:
    overload, kinds = _overload(key), _kinds(key)
    formals = overload._schema.arguments

    def call(x: torch.Tensor) -> Any:
        n = x.shape[0]
        values: list[Any] = []
        named: dict[str, Any] = {}
        for kind, formal in zip(kinds, formals, strict=False):
            value = n if kind == "S" else x > 2 if formal.name in ("condition", "mask") else x
            if formal.kwarg_only:
                named[formal.name] = value
            else:
                values.append(value)
        return overload(*values, **named)

    return call


class Sweep(nn.Module):
    def __init__(self, call: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.call = call

    def forward(self, x: torch.Tensor) -> Any:
        return self.call(x)


def _sweep_input(n: int, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.linspace(0.25, 3.0, n * 3).reshape(n, 3).to(dtype)
    return torch.arange(1, n * 3 + 1).reshape(n, 3).to(dtype)


def _eager_dtype(key: str) -> torch.dtype | None:
    """The first input dtype eager PyTorch accepts for the sweep's call (None: neither)."""
    for dtype in (torch.int64, torch.float32):
        try:
            _call_for(key, dtype)(_sweep_input(5, dtype))
        except (RuntimeError, TypeError, NotImplementedError, IndexError, ValueError):
            continue
        return dtype
    return None


def _sweep_keys() -> list[str]:
    return [k for k in _scalar_overloads() if k not in NOT_SWEPT]


def test_the_sweep_finds_the_scalar_overloads() -> None:
    keys = _scalar_overloads()
    for expected in (
        "aten::remainder.Scalar",
        "aten::pow.Tensor_Scalar",
        "aten::__lshift__.Scalar",
    ):
        assert expected in keys
    assert len(keys) > 40, keys


@pytest.mark.parametrize("key", _sweep_keys())
def test_scalar_overload_fed_a_symint(key: str) -> None:
    """Every Scalar overload with an ONNX function, its scalars given the batch size."""
    dtype = _eager_dtype(key)
    if dtype is None:
        pytest.skip(f"eager PyTorch refuses the sweep's call of {key} on int64 and float32")
    call = _call_for(key, dtype)
    model = Sweep(call)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "n"}})
    try:
        program = onnx_export.dynamo_export(model, _sweep_input(5, dtype), export_options=options)
    except onnx_export.CaptureError:
        pytest.skip(f"torch.export specialises or refuses {key} with a SymInt")
    except onnx_export.ConversionError as e:
        if key in TAKES_A_CONSTANT:
            assert "as a constant" in str(e) and "RecordedValue" not in str(e), str(e)
            return
        raise
    assert key not in TAKES_A_CONSTANT, f"{key} now exports: drop it from TAKES_A_CONSTANT"
    for n in (5, 8, 2):
        assert_onnx_program_close(program, model, _sweep_input(n, dtype), rtol=1e-3, atol=1e-4)


# -- the message when a built-in function fails ------------------------------------------


def test_a_builtin_function_failure_is_our_bug_at_the_users_line() -> None:
    """Not "register your own function", not an internal type: our bug, the op, the line."""
    from onnx_export import OnnxRegistry
    from onnx_export.translation._dispatch import dispatch
    from onnx_export.translation._stage import conversion_error
    from onnx_export.translation._translate import NodeTranslationError

    model = Fn(lambda x, i: torch.relu(x) + i.sum())
    program = torch.export.export(model, _inputs(*_SIZES[0]))
    node = next(n for n in program.graph.nodes if n.target is aten.relu.default)
    decision = dispatch(node, OnnxRegistry())
    cause = TypeError("int() argument must be a real number, not 'RecordedValue'")
    error = NodeTranslationError(node, decision, cause)
    error.__cause__ = cause
    message = str(conversion_error(error))
    assert "aten.relu.default" in message and "test_symbolic_scalars.py:" in message
    assert "bug in onnx-export" in message and "report it" in message
    assert "RecordedValue" not in message and "register" not in message
