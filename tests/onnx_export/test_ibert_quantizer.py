"""I-BERT's integer-only quantizer exported with eager's exact integers (#28).

Its fixed-point multiply calls numpy's ``frexp`` and Python's ``decimal`` on traced
tensors (``batch_frexp``: ``capture/patches/_quant_frexp.py`` computes it with torch ops), its
quantized layers read ``weight.data`` in ``forward`` (``capture/patches/_tensor_data.py``: a
fake constant before) and its integer GELU computes ``1.0 // scaling_factor``
(``ops/division.py``: ATen's floor division, not ``Floor(Div)``). Each test builds a tiny
real model from a config and compares ONNX Runtime with eager at two inputs.
"""

from __future__ import annotations

import pytest
import torch

from onnx_export.capture.patches._quant_frexp import batch_frexp
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")
quant_modules = pytest.importorskip("transformers.models.ibert.quant_modules")

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def test_batch_frexp_in_torch_ops_gives_numpys_integers() -> None:
    """Same dtypes and values as I-BERT's numpy and ``decimal`` version, ties included
    (``ROUND_HALF_UP`` rounds them away from zero; ``torch.round`` would go to even)."""
    generator = torch.Generator().manual_seed(0)
    spread = torch.rand(500, generator=generator, dtype=torch.float64)
    spread = spread * 10.0 ** torch.randint(-12, 4, (500,), generator=generator).double()
    ties = (torch.arange(1, 100, dtype=torch.float64) + 0.5 + 2**30) / 2**31
    special = torch.tensor([0.0, 1.0, 0.5, 3.0, 1 - 2**-53], dtype=torch.float64)
    for values in (spread, ties, special, -spread, -ties):
        expected = quant_modules.batch_frexp(values.view(1, 1, -1))
        got = batch_frexp(values.view(1, 1, -1))
        for want, have in zip(expected, got, strict=True):
            assert have.dtype == want.dtype and torch.equal(have.view(want.shape), want)


class _Frexp(torch.nn.Module):
    def forward(self, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return batch_frexp(scales)


def test_batch_frexp_in_onnx_runtime_gives_the_same_integers() -> None:
    """ONNX's frexp (a logarithm, then a correction by one) gives exact mantissas."""
    generator = torch.Generator().manual_seed(2)
    values = torch.rand(2000, generator=generator, dtype=torch.float64)
    values = values * 10.0 ** torch.randint(-12, 4, (2000,), generator=generator).double()
    powers = 2.0 ** torch.arange(-40, 20, dtype=torch.float64)
    example = torch.cat([values, powers, powers * (1 - 2**-53), -values])
    with torch.no_grad():
        program = export_and_check(_Frexp(), example)
    got, expected = program(example), quant_modules.batch_frexp(example)
    for have, want in zip(got, expected, strict=True):
        assert have.dtype == want.dtype and torch.equal(have, want)


def test_ibert_quantized_model_matches_eager_exactly() -> None:
    config = transformers.IBertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64, quant_mode=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.IBertModel(config).eval()
    generator = torch.Generator().manual_seed(1)
    first, second = (torch.randint(3, 99, (2, 7), generator=generator) for _ in range(2))
    with torch.no_grad():
        program = export_and_check(model, input_ids=first)
        assert_onnx_program_close(program, model, input_ids=second)
        # the encoder's output is integers times a scale: equal, not close (the pooler's
        # float dense and tanh differ in the last bits)
        expected = model(input_ids=second).last_hidden_state
    assert torch.equal(program(input_ids=second).last_hidden_state, expected)
