"""torch composites torch.export could not capture as torch writes them (two capture patches).

- ``fixed_size_composites``: ``take_along_dim``, ``kron`` and ``multi_dot`` compute from
  plain-int sizes, so torch.export fixed every dynamic axis they saw ("the model's code
  fixes the size of a dimension");
- ``value_checked_composites``: ``cov`` and ``corrcoef`` check a value (``aten.equal``)
  and ``combinations`` selects with ``masked_select``: no capture at any shape.

Each model here is exported (its axes dynamic where it has them) and run in ONNX Runtime
against eager at the example, at another size and at size 1.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import onnx_export
from onnx_export.capture.patches._fixed_size_composites import kron, multi_dot, take_along_dim
from onnx_export.capture.patches._value_checked_composites import combinations, corrcoef, cov
from tests.capture_patches import refused_without
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class TopKTokens(nn.Module):
    """Keeps each row's k highest-scoring tokens (a token-pruning or detection head)."""

    def forward(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        index = scores.topk(3, dim=1).indices
        return torch.take_along_dim(tokens, index.unsqueeze(-1), dim=1)


class SortedRows(nn.Module):
    """Rows sorted by a key, with the method form and a broadcast index."""

    def forward(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        order = key.argsort(dim=-1)  # (batch, 1, n): broadcast over x's channels
        return x.take_along_dim(order, -1) * 2


class Flattened(nn.Module):
    """``dim=None``: indices into the flattened input."""

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.take_along_dim(x, index)


class BlockUpsample(nn.Module):
    """Each pixel repeated in a 2x2 block, scaled by a learned kernel (``kron``)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.tensor([[1.0, 0.5], [0.25, 2.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.kron(x, self.kernel) + x.kron(torch.ones(1, 1, 1)).mean()


def _run(model: nn.Module, inputs: dict[str, torch.Tensor], dims: dict[str, Any]) -> Any:
    options = onnx_export.ExportOptions(dynamic_shapes=dims)
    return onnx_export.dynamo_export(model.eval(), **inputs, export_options=options)


def test_top_k_tokens_gathered_along_a_dynamic_batch_and_length() -> None:
    torch.manual_seed(0)
    model = TopKTokens()
    dims = {"tokens": {0: "batch", 1: "n"}, "scores": {0: "batch", 1: "n"}}
    program = _run(model, {"tokens": torch.randn(2, 7, 4), "scores": torch.randn(2, 7)}, dims)
    for batch, n in ((2, 7), (5, 9), (1, 3)):
        tokens, scores = torch.randn(batch, n, 4), torch.randn(batch, n)
        assert_onnx_program_close(program, model, tokens=tokens, scores=scores)


def test_the_method_form_with_a_broadcast_index() -> None:
    torch.manual_seed(0)
    model = SortedRows()
    dims = {"x": {0: "batch", 2: "n"}, "key": {0: "batch", 2: "n"}}
    program = _run(model, {"x": torch.randn(2, 3, 6), "key": torch.randn(2, 1, 6)}, dims)
    for batch, n in ((2, 6), (4, 11), (1, 1)):
        x, key = torch.randn(batch, 3, n), torch.randn(batch, 1, n)
        assert_onnx_program_close(program, model, x=x, key=key)


def test_indices_into_the_flattened_input() -> None:
    torch.manual_seed(0)
    model = Flattened()
    dims = {"x": {0: "batch"}, "index": {0: "count"}}
    x, index = torch.randn(3, 4), torch.tensor([0, 5, 11, 2])
    program = _run(model, {"x": x, "index": index}, dims)
    assert_onnx_program_close(program, model, x=x, index=index)
    assert_onnx_program_close(program, model, x=torch.randn(5, 4), index=torch.tensor([19, 0]))
    assert_onnx_program_close(program, model, x=torch.randn(1, 4), index=torch.tensor([3]))


def test_kron_on_a_dynamic_image() -> None:
    torch.manual_seed(0)
    model = BlockUpsample()
    program = _run(model, {"x": torch.randn(2, 5, 6)}, {"x": {0: "batch", 1: "h", 2: "w"}})
    for shape in ((2, 5, 6), (3, 7, 4), (1, 1, 1)):
        assert_onnx_program_close(program, model, torch.randn(*shape))


@pytest.mark.parametrize(
    "shapes", [((2, 3), (2, 2)), ((4,), (3, 2)), ((2, 1, 3), (3,)), ((), (2,))]
)
def test_kron_is_torchs_for_every_rank(shapes: tuple[tuple[int, ...], ...]) -> None:
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    torch.testing.assert_close(kron(a, b), torch.kron(a, b))


@pytest.mark.parametrize("dim", [0, 1, -1, None])
def test_take_along_dim_is_torchs(dim: int | None) -> None:
    x = torch.randn(3, 5)
    index = torch.randint(0, 3 if dim == 0 else 5, (1 if dim == 0 else 3, 2 if dim else 5))
    if dim is None:
        index = torch.randint(0, 15, (4,))
    torch.testing.assert_close(take_along_dim(x, index, dim), torch.take_along_dim(x, index, dim))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        take_along_dim(x, torch.zeros(2, dtype=torch.long), 0)


def test_the_patch_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    dims = {"tokens": {0: "batch", 1: "n"}, "scores": {0: "batch", 1: "n"}}
    inputs = {"tokens": torch.randn(2, 7, 4), "scores": torch.randn(2, 7)}
    error = refused_without(
        monkeypatch, "fixed_size_composites", lambda: _run(TopKTokens(), inputs, dims)
    )
    assert "fixes the size" in str(error)


class Chain(nn.Module):
    """A vector through two projections (``multi_dot`` picks its order from the sizes)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Parameter(torch.randn(4, 6)), nn.Parameter(torch.randn(6, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.multi_dot([x, self.a, self.b])


def test_multi_dot_over_a_dynamic_batch() -> None:
    torch.manual_seed(0)
    model = Chain()
    program = _run(model, {"x": torch.randn(3, 4)}, {"x": {0: "batch"}})
    for batch in (3, 8, 1):
        assert_onnx_program_close(program, model, torch.randn(batch, 4))


@pytest.mark.parametrize(
    "shapes", [((3, 4), (4, 5)), ((4,), (4, 5), (5, 2)), ((2, 3), (3, 4), (4,)), ((3,), (3,))]
)
def test_multi_dot_is_torchs(shapes: tuple[tuple[int, ...], ...]) -> None:
    tensors = [torch.randn(s) for s in shapes]
    torch.testing.assert_close(multi_dot(tensors), torch.linalg.multi_dot(tensors))


class FeatureStatistics(nn.Module):
    """Whitening statistics of a batch of features (CORAL-style): ``cov`` and ``corrcoef``."""

    def forward(self, features: torch.Tensor, weights: torch.Tensor) -> Any:
        rows = features.transpose(0, 1)  # variables x observations
        return (
            torch.cov(rows),
            rows.cov(correction=0, aweights=weights),
            torch.cov(rows, fweights=(weights * 3).long() + 1, aweights=weights),
            torch.corrcoef(rows),
        )


def test_cov_and_corrcoef_over_a_dynamic_number_of_observations() -> None:
    torch.manual_seed(0)
    model = FeatureStatistics()
    dims = {"features": {0: "n"}, "weights": {0: "n"}}
    inputs = {"features": torch.randn(6, 3), "weights": torch.rand(6)}
    program = _run(model, inputs, dims)
    for n in (6, 11, 2):
        assert_onnx_program_close(program, model, features=torch.randn(n, 3), weights=torch.rand(n))
    # one observation: no degree of freedom left (torch divides by 0, and so does the file)
    one = {"features": torch.randn(1, 3), "weights": torch.rand(1)}
    got, want = program(**one)[0], model(**one)[0]
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())


class PairTable(nn.Module):
    """Every pair of a fixed set of slots, scored (``combinations`` of a known length)."""

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        pairs = torch.combinations(torch.arange(slots.shape[1]), 2)
        left, right = slots[:, pairs[:, 0]], slots[:, pairs[:, 1]]
        return (left * right).sum(-1) + torch.combinations(slots[0, :, 0], 3).sum()


def test_combinations_of_a_known_length_with_a_dynamic_batch() -> None:
    torch.manual_seed(0)
    model = PairTable()
    program = _run(model, {"slots": torch.randn(2, 5, 4)}, {"slots": {0: "batch"}})
    for batch in (2, 6, 1):
        assert_onnx_program_close(program, model, torch.randn(batch, 5, 4))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"correction": 0},
        {"correction": 3},
        {"fweights": torch.tensor([1, 2, 1, 4])},
        {"aweights": torch.tensor([0.5, 1.0, 2.0, 0.1])},
        {"fweights": torch.tensor([1, 2, 1, 4]), "aweights": torch.tensor([0.5, 1.0, 2.0, 0.1])},
    ],
)
@pytest.mark.parametrize("shape", [(3, 4), (1, 4), (4,)])
def test_cov_and_corrcoef_are_torchs(shape: tuple[int, ...], kwargs: dict[str, Any]) -> None:
    x = torch.randn(shape)
    torch.testing.assert_close(cov(x, **kwargs), torch.cov(x, **kwargs))
    integers = torch.randint(-5, 5, shape)
    torch.testing.assert_close(cov(integers, **kwargs), torch.cov(integers, **kwargs))
    torch.testing.assert_close(corrcoef(x), torch.corrcoef(x))


@pytest.mark.parametrize(("r", "replace"), [(1, False), (2, False), (3, True), (5, False)])
def test_combinations_is_torchs(r: int, replace: bool) -> None:
    x = torch.tensor([3.0, 1.0, 4.0, 1.5])
    torch.testing.assert_close(combinations(x, r, replace), torch.combinations(x, r, replace))


def test_the_value_checked_patch_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = {"features": torch.randn(6, 3), "weights": torch.rand(6)}
    error = refused_without(
        monkeypatch, "value_checked_composites", lambda: _run(FeatureStatistics(), inputs, None)
    )
    assert "aten.equal" in str(error)
