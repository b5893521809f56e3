"""One case per own op key that no CI OpInfo entry reaches: exported, run in ORT, compared.

Each case calls the ATen overload it covers (``torch.ops.aten.foo.overload``) so that the
export keeps that node, checks that dispatch took our function for it (not torchlib's,
not a decomposition) and compares ONNX Runtime's outputs with eager PyTorch's (random
ops: shapes and dtypes only). ``test_op_coverage.py`` counts these keys as covered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close, torch_has_op
from tests.ops.opinfo_harness import own_op_keys

aten = torch.ops.aten

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


@dataclasses.dataclass(frozen=True)
class OwnOpCase:
    """One own op key exercised by a small module.

    Attributes:
        key: The ``@onnx_op`` key (``" (complex)"`` appended for a complex variant).
        name: The test id.
        forward: The module's ``forward`` body, called with the inputs.
        inputs: Makes the example inputs (deterministic).
        shape_only: Compare shapes and dtypes only (random or uninitialised outputs).
        rtol: Relative tolerance of the comparison.
        atol: Absolute tolerance of the comparison.
    """

    key: str
    name: str
    forward: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    shape_only: bool = False
    rtol: float = 1e-4
    atol: float = 1e-5


def _rand(*shape: int, low: float = -2.0, high: float = 2.0, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=generator) * (high - low) + low


def _ints(*shape: int, low: int = -6, high: int = 7, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=generator)


def _spd(n: int = 3) -> torch.Tensor:
    a = _rand(n, n, seed=1)
    return a @ a.T + n * torch.eye(n)


def _late(name: str) -> Callable[..., Any]:
    """``aten.<name>``, looked up at call time: a newer torch may lack it (see test_own_op)."""

    def call(*args: Any) -> Any:
        return getattr(aten, name)(*args)

    return call


def _case(
    key: str, forward: Callable[..., Any], inputs: Callable[[], tuple[Any, ...]], **kw: Any
) -> OwnOpCase:
    name = kw.pop("name", key.removeprefix("aten::").replace(" (complex)", "-complex"))
    return OwnOpCase(key, name, forward, inputs, **kw)


def _x() -> tuple[torch.Tensor]:
    return (_rand(3, 4),)


def _six() -> tuple[torch.Tensor]:
    return (_rand(2, 6),)


def _positive() -> tuple[torch.Tensor]:
    return (_rand(3, 4, low=0.1, high=6.0),)


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    return _rand(3, 4), _rand(3, 4, seed=1)


def _bools() -> tuple[torch.Tensor, torch.Tensor]:
    return _ints(3, 4, low=0, high=2) > 0, _ints(3, 4, low=0, high=2, seed=1) > 0


def _specials() -> tuple[torch.Tensor]:
    return (torch.tensor([[-1.5, 0.0, 2.0], [float("inf"), float("nan"), -float("inf")]]),)


_CORE = [
    _case("aten::__and__.Tensor", aten.__and__.Tensor, _bools),
    _case("aten::__or__.Tensor", aten.__or__.Tensor, _bools),
    _case("aten::__xor__.Tensor", aten.__xor__.Tensor, _bools),
    _case("aten::diff", lambda x, p: aten.diff(x, 2, -1, p), lambda: (_rand(3, 5), _rand(3, 1))),
    _case("aten::_sparse_mm", torch.sparse.mm, lambda: (_rand(3, 4), _rand(4, 2, seed=1))),
    _case(
        "aten::_sparse_addmm",
        lambda c, a, b: torch.sparse.addmm(c, a, b, beta=0.5, alpha=2.0),
        lambda: (_rand(3, 2, seed=2), _rand(3, 4), _rand(4, 2, seed=1)),
    ),
    _case("aten::var.correction", lambda x: aten.var.correction(x, [1], correction=2), _x),
    _case("aten::std_mean.correction", lambda x: aten.std_mean.correction(x, [0]), _x),
    _case("aten::to.dtype_layout", lambda x: aten.to.dtype_layout(x, dtype=torch.float64), _x),
]

_MATH = [
    _case("aten::min.other", aten.min.other, lambda: (_specials()[0], _rand(2, 3))),
    _case("aten::max.other", aten.max.other, lambda: (_specials()[0], _rand(2, 3))),
    _case("aten::copysign.Scalar", lambda x: aten.copysign.Scalar(x, -1.0), _x),
    _case("aten::floor", aten.floor, _x),
    _case("aten::round", aten.round, _x),
    _case("aten::trunc", aten.trunc, _x),
    _case("aten::fmin", aten.fmin, lambda: (_specials()[0], _rand(2, 3))),
    _case("aten::hypot", aten.hypot, _pair),
    _case("aten::isinf", aten.isinf, _specials),
    _case("aten::isfinite", aten.isfinite, _specials),
    _case("aten::lcm", aten.lcm, lambda: (_ints(3, 4), _ints(3, 4, seed=1))),
    _case("aten::ldexp.Tensor", aten.ldexp, lambda: (_rand(3, 4), _ints(3, 4, low=-3, high=4))),
    _case("aten::special_entr", aten.special_entr, lambda: (_rand(3, 4, low=-0.5, high=3.0),)),
    _case("aten::special_erfcx", aten.special_erfcx, _x),
    _case("aten::special_psi", aten.special_psi, _positive),
]

_BESSEL = [
    _case("aten::i0", aten.i0, _x),
    _case("aten::special_i1", aten.special_i1, _x),
    _case("aten::special_i1e", aten.special_i1e, _x),
    _case("aten::special_modified_bessel_i0", aten.special_modified_bessel_i0, _x),
    _case("aten::special_modified_bessel_i1", aten.special_modified_bessel_i1, _x),
    _case("aten::special_modified_bessel_k0", aten.special_modified_bessel_k0, _positive),
    _case(
        "aten::special_scaled_modified_bessel_k0",
        aten.special_scaled_modified_bessel_k0,
        _positive,
    ),
    _case(
        "aten::special_scaled_modified_bessel_k1",
        aten.special_scaled_modified_bessel_k1,
        _positive,
    ),
    _case("aten::special_bessel_j1", aten.special_bessel_j1, lambda: (_rand(3, 4, high=9.0),)),
    _case("aten::special_bessel_y0", aten.special_bessel_y0, _positive),
    _case("aten::special_bessel_y1", aten.special_bessel_y1, _positive),
    _case("aten::special_spherical_bessel_j0", aten.special_spherical_bessel_j0, _x),
]

_GAMMA = [
    _case("aten::igammac", aten.igammac, lambda: (_positive()[0], _rand(3, 4, low=0.1, seed=1))),
    _case("aten::special_gammainc", aten.special_gammainc, lambda: _positive() * 2),
    _case("aten::special_gammaincc", aten.special_gammaincc, lambda: _positive() * 2),
]


def _polynomial_cases() -> list[OwnOpCase]:
    families = ["chebyshev_polynomial_" + k for k in "tuvw"]
    families += ["shifted_chebyshev_polynomial_" + k for k in "tuvw"]
    families += ["hermite_polynomial_h", "hermite_polynomial_he"]
    families += ["laguerre_polynomial_l", "legendre_polynomial_p"]
    degrees = torch.tensor([0, 1, 2, 3, 5, 6])
    cases = []
    for family in families:
        packet = getattr(aten, f"special_{family}")
        low = 0.0 if family.startswith("shifted") else -1.0
        cases += [
            _case(
                f"aten::special_{family}",
                packet.default,
                lambda low=low: (_rand(6, low=low, high=1.0), degrees),
                rtol=1e-3,
                atol=1e-4,
            ),
            _case(
                f"aten::special_{family}.x_scalar",
                lambda n, packet=packet: packet.x_scalar(0.375, n),
                lambda: (degrees,),
                rtol=1e-3,
                atol=1e-4,
            ),
            _case(
                f"aten::special_{family}.n_scalar",
                lambda x, packet=packet: packet.n_scalar(x, 3),
                lambda low=low: (_rand(6, low=low, high=1.0),),
                rtol=1e-3,
                atol=1e-4,
            ),
        ]
    return cases


_REDUCE = [
    # The ``unbiased`` overloads torch.export keeps as written (timm's weight standardisation).
    _case("aten::var", lambda x: aten.var(x, False), lambda: (_rand(3, 4),)),
    _case("aten::var.dim", lambda x: aten.var.dim(x, [1], True, True), lambda: (_rand(3, 4),)),
    _case("aten::std", lambda x: aten.std(x, True), lambda: (_rand(3, 4),)),
    _case("aten::std.dim", lambda x: aten.std.dim(x, [0, -1], False), lambda: (_rand(2, 3, 4),)),
    _case("aten::var_mean", lambda x: aten.var_mean(x, True), lambda: (_rand(3, 4),)),
    _case(
        "aten::var_mean.dim",
        lambda w: aten.var_mean.dim(w, [1, 2, 3], False, True),
        lambda: (_rand(6, 3, 3, 3),),
    ),
    _case("aten::std_mean", lambda x: aten.std_mean(x, False), lambda: (_rand(3, 4),)),
    _case("aten::std_mean.dim", lambda x: aten.std_mean.dim(x, [0], True), lambda: (_rand(3, 4),)),
    _case(
        "aten::reshape_as",
        lambda x, y: aten.reshape_as(x, y) + y,
        lambda: (_rand(2, 6), _rand(3, 4, seed=1)),
    ),
    _case("aten::all.dims", lambda x: aten.all.dims(x, [0, 1]), lambda: (_ints(2, 3, 4) > -5,)),
    _case("aten::any.dims", lambda x: aten.any.dims(x, [0, 2]), lambda: (_ints(2, 3, 4) > 4,)),
    _case(
        "aten::count_nonzero.dim_IntList",
        lambda x: aten.count_nonzero.dim_IntList(x, [0, 1]),
        lambda: (_ints(2, 3, 4),),
    ),
    _case("aten::cummin", lambda x: aten.cummin(x, 1), _x),
    _case(
        "aten::bucketize.Scalar",
        lambda b: aten.bucketize.Scalar(0.5, b),
        lambda: (torch.tensor([-1.0, 0.0, 0.5, 2.0]),),
    ),
    _case(
        "aten::searchsorted.Scalar",
        lambda s: aten.searchsorted.Scalar(s, 0.5, right=True),
        lambda: (torch.tensor([-1.0, 0.0, 0.5, 2.0]),),
    ),
]

_TENSOR = [
    # the data's range (min == max, the default), a one-value input widened by 1, a range
    _case(
        "aten::histc",
        lambda x: (
            torch.histc(x, 5),
            torch.histc(x * 0 + 2, 4),
            torch.histc(x, 4, 3.0, 3.0),
            torch.histc(x, 4, -1.0, 1.0),
        ),
        lambda: (torch.tensor([[0.5, -1.5, 3.0], [2.25, 1.0, -0.75]]),),
    ),
    # 1.0 - an integer mask (promoted to float), and an alpha
    _case(
        "aten::rsub.Scalar",
        lambda x, m: (1.0 - m) * -1e4 + aten.rsub.Scalar(x, 2.0, 3.0),
        lambda: (_rand(2, 3), torch.tensor([[1, 0, 1], [0, 0, 1]])),
    ),
    # cdist and pdist kept whole (torch.export's pre-dispatch graph), and their forward
    # overloads (a graph decomposed again: the full re-trace of a missing op)
    _case(
        "aten::_cdist_forward",
        lambda x, y: aten._cdist_forward(x, y, 2.0, None),
        lambda: (_rand(3, 4), _rand(5, 4, seed=1)),
    ),
    _case("aten::_pdist_forward", lambda x: aten._pdist_forward(x, 1.0), lambda: (_rand(4, 3),)),
    _case(
        "aten::movedim.int", lambda x: aten.movedim.int(x, 0, -1) * 1.0, lambda: (_rand(2, 3, 4),)
    ),
    _case(
        "aten::native_channel_shuffle",
        lambda x: aten.native_channel_shuffle(x, 3),
        lambda: (_rand(2, 6, 2, 3),),
    ),
    _case(
        "aten::cosine_similarity",  # broadcast, a negative dim, a zero row (eps)
        lambda x, y: aten.cosine_similarity(x, y * torch.tensor([[1.0], [0.0], [1.0]]), -1, 1e-8),
        lambda: (_rand(2, 3, 4), _rand(3, 4, seed=1)),
        name="cosine_similarity-broadcast",
    ),
    _case(
        "aten::pairwise_distance",
        lambda x, y: [
            aten.pairwise_distance(x, y, p, 1e-6, k)
            for p, k in ((1.0, True), (3.0, False), (float("inf"), False), (0.0, False))
        ],
        lambda: (_rand(2, 5), _rand(2, 5, seed=1)),
        name="pairwise_distance-norms",
    ),
    _case(  # the overload without indexing ("ij"): a 0-D and a 1-D input
        "aten::meshgrid",
        lambda x, y: [g * 1.0 for g in aten.meshgrid([x, y])],
        lambda: (_rand(()), _rand(3)),
    ),
    _case("aten::as_strided_copy", lambda x: aten.as_strided_copy(x, [2, 2], [1, 2], 1), _x),
    _case(  # a transposed view: strides count its memory (x's rows), not its row-major order
        "aten::as_strided",
        lambda x: aten.as_strided(x.t(), [3, 3], [2, 1], 1) * 1.0,
        _x,
    ),
    _case(  # an output axis sized by the data (the rows the mask keeps)
        "aten::einsum",
        lambda x, m: aten.einsum("blhd,bshd->blhs", [x, x[:, m]]),
        lambda: (_rand(2, 4, 2, 3), torch.tensor([True, False, True, False])),
    ),
    _case(  # 1.0 // 0.1 is 9.0 in torch and Python; floor(1.0 / 0.1) is 10.0
        "aten::floor_divide",
        lambda x: 1.0 // x,
        lambda: (torch.tensor([0.1, 0.3, -0.7, 2.0, 0.2, 1.0 / 3.0]),),
    ),
    _case(
        "aten::atleast_1d.Sequence",
        lambda a, b: aten.atleast_1d.Sequence([a.sum(), b]),
        _pair,
    ),
    _case("aten::atleast_2d.Sequence", lambda a, b: aten.atleast_2d.Sequence([a, b]), _pair),
    _case(
        "aten::atleast_3d.Sequence",
        lambda a, b: aten.atleast_3d.Sequence([a, b]),
        lambda: (_rand(4), _rand(2, 3)),
    ),
    _case("aten::dist", lambda a, b: aten.dist(a, b, 3), _pair),
    _case("aten::narrow_copy", lambda x: aten.narrow_copy(x, 1, 1, 2), _x),
    _case(
        "aten::squeeze.dim",
        lambda x: (aten.squeeze.dim(x, 0), aten.squeeze.dim(x, 1)),  # a size of 3, then 1
        lambda: (_rand(3, 1, 4),),
    ),
    _case(
        "aten::nonzero_static",
        lambda x: aten.nonzero_static(x, size=8),
        lambda: (_ints(3, 4, low=0, high=2),),
    ),
    _case(
        "aten::permute_copy", lambda x: aten.permute_copy(x, [2, 0, 1]), lambda: (_rand(2, 3, 4),)
    ),
    _case("aten::tril_indices", lambda x: (aten.tril_indices(3, 4, 1), x * 2), _x),
    _case(
        "aten::empty_permuted",
        lambda x: (aten.empty_permuted([2, 3], [1, 0], dtype=torch.float32), x * 2),
        _x,
        shape_only=True,
    ),
    _case("aten::cauchy", lambda x: aten.cauchy(x, 0.0, 1.0), _x, shape_only=True),
    _case("aten::exponential", lambda x: aten.exponential(x, 2.0), _x, shape_only=True),
    _case("aten::geometric", lambda x: aten.geometric(x, 0.3), _x, shape_only=True),
    _case("aten::log_normal", lambda x: aten.log_normal(x, 0.0, 1.0), _x, shape_only=True),
    _case(
        "aten::rrelu_with_noise_functional",
        lambda x, noise: aten.rrelu_with_noise_functional(x, noise, 0.1, 0.3, True),
        lambda: (_rand(3, 4), torch.zeros(3, 4)),
        shape_only=True,
    ),
    _case(
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True),
        lambda: (_rand(2, 3, 5, 8), _rand(2, 3, 6, 8, seed=1), _rand(2, 3, 6, 8, seed=2)),
        atol=1e-4,
        name="sdpa_flash_for_cpu",
    ),
]


def _lu_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lu, pivots = torch.linalg.lu_factor(_rand(3, 3, seed=2) + 2 * torch.eye(3))
    return lu, pivots, _rand(3, 2, seed=3)


_LINALG = [
    # aten.cholesky is looked up at call time: torch 2.14 removed it (the test skips there)
    _case("aten::cholesky", _late("cholesky"), lambda: (_spd(),), atol=1e-4),
    _case(
        "aten::cholesky_inverse",
        lambda a: aten.cholesky_inverse(torch.linalg.cholesky(a)),
        lambda: (_spd(),),
        atol=1e-4,
    ),
    _case("aten::linalg_lu", aten.linalg_lu, lambda: (_rand(3, 3, seed=2),), atol=1e-4),
    # torch >= 2.14 (looked up at call time; the cases skip on older torch)
    _case("aten::linalg_matrix_sqrth", _late("linalg_matrix_sqrth"), lambda: (_spd(),)),
    _case(
        "aten::linalg_polar",
        _late("linalg_polar"),
        lambda: (_rand(2, 4, 3, seed=2),),
        atol=1e-4,
    ),
    _case(
        "aten::linalg_lu_solve",
        aten.linalg_lu_solve,
        _lu_inputs,
        atol=1e-4,
    ),
    _case(
        "aten::triangular_solve",
        lambda b, a: aten.triangular_solve(b, a, upper=True),
        lambda: (_rand(3, 2), torch.triu(_rand(3, 3, seed=2)) + 3 * torch.eye(3)),
        atol=1e-4,
    ),
    _case(
        "aten::linalg_householder_product",
        aten.linalg_householder_product,
        lambda: (_rand(4, 3), _rand(3, low=0.5, high=1.5, seed=1)),
        atol=1e-4,
    ),
    _case(
        "aten::ormqr",
        aten.ormqr,
        lambda: (_rand(4, 3), _rand(3, low=0.5, high=1.5, seed=1), _rand(4, 2, seed=2)),
        atol=1e-4,
    ),
]


def _batch_norm_inputs() -> tuple[torch.Tensor, ...]:
    return _rand(2, 3, 4, 4), _rand(3, seed=1), _rand(3, seed=2), _rand(3, seed=3), _positive_3()


def _positive_3() -> torch.Tensor:
    return _rand(3, low=0.5, high=1.5, seed=4)


_NN = [
    # ``padding="same"`` / ``"valid"`` convolutions (torch.export keeps the .padding overload).
    _case(
        "aten::conv1d.padding",
        lambda x, w, b: aten.conv1d.padding(x, w, b, [1], "same", [2], 1),
        lambda: (_rand(2, 4, 9), _rand(6, 4, 4, seed=1), _rand(6, seed=2)),
    ),
    _case(
        "aten::conv2d.padding",
        lambda x, w: aten.conv2d.padding(x, w, None, [1, 1], "same", [1, 2], 2),
        lambda: (_rand(1, 4, 7, 8), _rand(6, 2, 4, 3, seed=1)),
    ),
    _case(
        "aten::conv2d.padding",
        lambda x, w: aten.conv2d.padding(x, w, None, [2, 1], "valid", [1, 1], 1),
        lambda: (_rand(4, 7, 8), _rand(3, 4, 3, 3, seed=1)),
        name="conv2d.padding-valid-unbatched",
    ),
    _case(
        "aten::_native_batch_norm_legit_functional",
        lambda x, w, b, m, v: aten._native_batch_norm_legit_functional(
            x, w, b, m, v, True, 0.1, 1e-5
        ),
        _batch_norm_inputs,
    ),
    _case(
        "aten::_native_batch_norm_legit.no_stats",
        lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
        lambda: _batch_norm_inputs()[:3],
    ),
    _case(
        "aten::_batch_norm_with_update_functional",
        lambda x, w, b, m, v: aten._batch_norm_with_update_functional(x, w, b, m, v, 0.1, 1e-5),
        _batch_norm_inputs,
    ),
    _case(
        "aten::im2col",
        lambda x: aten.im2col(x, [2, 2], [1, 1], [1, 0], [2, 1]),
        lambda: (_rand(1, 2, 5, 4),),
    ),
]

_POOL = [
    _case(
        "aten::_adaptive_avg_pool2d",
        lambda x: aten._adaptive_avg_pool2d(x, [2, 3]),
        lambda: (_rand(1, 2, 5, 7),),
    ),
    _case(
        "aten::adaptive_avg_pool2d",
        lambda x: aten.adaptive_avg_pool2d(x, [2, 3]),
        lambda: (_rand(1, 2, 5, 7),),
    ),
    _case(
        "aten::adaptive_avg_pool3d",
        lambda x: aten.adaptive_avg_pool3d(x, [2, 3, 2]),
        lambda: (_rand(1, 2, 5, 4, 5),),
    ),
    _case(
        "aten::avg_pool3d",
        lambda x: aten.avg_pool3d(x, [2, 2, 2], [2, 2, 2], [1, 0, 0], True),
        lambda: (_rand(1, 2, 5, 4, 5),),
    ),
    _case(
        "aten::_adaptive_avg_pool3d",
        lambda x: aten._adaptive_avg_pool3d(x, [2, 3, 2]),
        lambda: (_rand(1, 2, 5, 4, 5),),
    ),
    _case(
        "aten::adaptive_max_pool3d",
        lambda x: aten.adaptive_max_pool3d(x, [2, 3, 2]),
        lambda: (_rand(1, 2, 5, 4, 5),),
    ),
    _case(
        "aten::fractional_max_pool2d",
        lambda x, samples: aten.fractional_max_pool2d(x, [2, 2], [3, 3], samples),
        lambda: (_rand(1, 2, 7, 7), _rand(1, 2, 2, low=0.0, high=1.0, seed=1)),
    ),
    _case(
        "aten::fractional_max_pool3d",
        lambda x, samples: aten.fractional_max_pool3d(x, [2, 2, 2], [3, 3, 3], samples),
        lambda: (_rand(1, 2, 7, 7, 7), _rand(1, 2, 3, low=0.0, high=1.0, seed=1)),
    ),
]


def _histogramdd_data() -> tuple[torch.Tensor]:
    return (_rand(12, 2, seed=5),)


_HISTOGRAM = [
    _case(
        "aten::_histogramdd_bin_edges",
        lambda x: aten._histogramdd_bin_edges(x, [3, 4]),
        _histogramdd_data,
    ),
    _case(
        "aten::_histogramdd_from_bin_cts",
        lambda x: aten._histogramdd_from_bin_cts(x, [3, 4]),
        _histogramdd_data,
    ),
    _case(
        "aten::_histogramdd_from_bin_tensors",
        lambda x, e0, e1: aten._histogramdd_from_bin_tensors(x, [e0, e1]),
        lambda: (
            _histogramdd_data()[0],
            torch.tensor([-2.0, -0.5, 0.5, 2.0]),
            torch.tensor([-2.0, 0.0, 2.0]),
        ),
    ),
]


def _grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    import transformers.integrations.moe  # noqa: F401  (defines the custom op)

    return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


_SCATTER = [
    _case(
        "aten::scatter.value_reduce",
        lambda x, i: aten.scatter.value_reduce(x, 0, i, 2.0, reduce="multiply"),
        lambda: (_rand(3, 4), _ints(2, 4, low=0, high=3)),
    ),
    _case(
        "aten::segment_reduce",
        lambda data, lengths: aten.segment_reduce(data, "sum", lengths=lengths),
        lambda: (_rand(6, 2), torch.tensor([2, 0, 3, 1])),
    ),
    _case(
        "transformers::grouped_mm_fallback",
        _grouped_mm,
        lambda: (_rand(6, 4), _rand(3, 4, 5, seed=1), torch.tensor([2, 4, 6], dtype=torch.int32)),
    ),
]


def _complex() -> tuple[torch.Tensor]:
    return (torch.complex(_rand(3, 4), _rand(3, 4, seed=1)),)


_COMPLEX = [
    _case("aten::rsub.Scalar (complex)", lambda z: (1 + 1j) - z, _complex),
    _case(
        "aten::rsub.Tensor (complex)",
        lambda z, w: aten.rsub.Tensor(z, w, alpha=2) + aten.rsub.Tensor(z, w.real),
        lambda: _complex() * 2,
    ),
    _case("aten::silu (complex)", aten.silu, _complex),
    _case("aten::unsqueeze (complex)", lambda z: aten.unsqueeze(z, -1), _complex),
    _case("aten::alias (complex)", aten.alias, _complex),
    _case("aten::clone (complex)", aten.clone, _complex),
    _case("aten::roll (complex)", lambda z: aten.roll(z, [1, -2], [0, 1]), _complex),
    _case("aten::_fft_c2r (complex)", lambda z: aten._fft_c2r(z, [0, 1], 2, 6), _complex),
    _case("aten::roll (complex)", lambda z: aten.roll(z, [5]), _complex, name="roll-complex-flat"),
    _case("aten::contiguous (complex)", aten.contiguous, _complex),
    _case("aten::detach (complex)", aten.detach, _complex),
    _case("aten::lift_fresh_copy (complex)", aten.lift_fresh_copy, _complex),
    _case("aten::full (complex)", lambda z: z * torch.full((4,), 1 + 1j), _complex),
    _case("aten::full_like (complex)", lambda z: z * torch.full_like(z, 2 - 1j), _complex),
    _case("aten::eq.Scalar (complex)", lambda z: z == (1 + 1j), _complex),
    _case("aten::eq.Tensor (complex)", lambda z, w: z == w, lambda: _complex() * 2),
    _case("aten::ne.Scalar (complex)", lambda z: z != (1 + 1j), _complex),
    _case("aten::ne.Tensor (complex)", lambda z: z != z.conj(), _complex),
]

_RANGES = [
    # float results counted in double: 6 elements (float32 counting gave 5)
    _case("aten::arange.start_step", lambda x: aten.arange.start_step(1 / 6, 1.0, 1 / 6) + x, _six),
    _case("aten::arange.start", lambda x: x + aten.arange.start(0.5, 6.5), _six),
    _case("aten::arange", lambda x: x + aten.arange(6.0, dtype=torch.float16), _six),
    _case("aten::linspace", lambda x: x + aten.linspace(-4, 4, 4), _x),
    _case(
        "aten::linspace.Tensor_Tensor",
        lambda x: aten.linspace.Tensor_Tensor(x.min(), x.max(), 5),
        _x,
    ),
    _case(
        "aten::linspace.Tensor_Scalar",
        lambda x: aten.linspace.Tensor_Scalar(x.min(), 3.0, 5),
        _x,
    ),
    _case(
        "aten::linspace.Scalar_Tensor",
        lambda x: aten.linspace.Scalar_Tensor(-1.0, x.max(), 5),
        _x,
    ),
    _case(
        "aten::rms_norm",
        lambda x, w: aten.rms_norm(x, [4], w, 1e-5),
        lambda: (_rand(3, 4), _rand(4, seed=1)),
    ),
]

#: Every case, by topic.
CASES: tuple[OwnOpCase, ...] = (
    *_CORE,
    *_MATH,
    *_BESSEL,
    *_GAMMA,
    *_polynomial_cases(),
    *_REDUCE,
    *_TENSOR,
    *_LINALG,
    *_NN,
    *_POOL,
    *_HISTOGRAM,
    *_SCATTER,
    *_COMPLEX,
    *_RANGES,
)


class _Forward(torch.nn.Module):
    def __init__(self, forward: Callable[..., Any]) -> None:
        super().__init__()
        self.body = forward

    def forward(self, *args: Any) -> Any:
        return self.body(*args)


def _leaves(value: Any) -> list[torch.Tensor]:
    leaves = torch.utils._pytree.tree_leaves(value)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def test_case_names_are_unique() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_own_op(case: OwnOpCase) -> None:
    if not torch_has_op(case.key):
        pytest.skip(f"torch {torch.__version__} has no {case.key} (our function stays)")
    module = _Forward(case.forward)
    args = case.inputs()
    program = onnx_export.dynamo_export(module, *[a.clone() for a in args])
    dispatched = own_op_keys(program)
    assert case.key in dispatched, f"{case.key} did not reach our function: {sorted(dispatched)}"
    if not case.shape_only:
        assert_onnx_program_close(program, module, *args, rtol=case.rtol, atol=case.atol)
        return
    with torch.no_grad():
        expected = _leaves(module(*[a.clone() for a in args]))
    actual = _leaves(program(*[a.clone() for a in args]))
    assert [(t.shape, t.dtype) for t in actual] == [(t.shape, t.dtype) for t in expected]
