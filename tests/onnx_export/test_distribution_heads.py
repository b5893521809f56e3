"""Time-series prediction heads that build a ``torch.distributions`` object (#28).

TimeSeriesTransformer, Informer and Autoformer's ``...ForPrediction`` score the future
values with a distribution (Student's t by default) built from the model's parameters.
``torch.distributions`` validated those parameters with ``if not check(value).all():
raise``, a tensor's value under torch.export ("Could not guard on data-dependent
expression" at transformers' ``time_series_utils.py``); ``capture/patches/_distributions.py``
builds them without that validation. Autoformer also traced another attention path than
eager (a mask built under export where eager has none: ``capture/patches/_mask_skip.py``).
Each export is checked against eager, with the batch dynamic at another batch size.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnx_export
from onnx_export.capture.patches._distributions import distribution_checks_off
from tests.capture_patches import refused_without
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")

_CONFIG = {
    "prediction_length": 4, "context_length": 6, "lags_sequence": [1, 2, 3],
    "num_time_features": 2, "encoder_layers": 1, "decoder_layers": 1,
    "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 8,
    "decoder_ffn_dim": 8, "d_model": 16, "scaling": "std",
}  # fmt: skip


def _model(name: str) -> Any:
    config_class = getattr(transformers, f"{name}Config")
    # Autoformer: a label at most the context long; Informer: full attention, as its
    # ProbSparse attention samples keys with torch.randint (no parity with eager).
    extra = {"Autoformer": {"label_length": 3}, "Informer": {"attention_type": "full"}}
    torch.manual_seed(0)
    model = getattr(transformers, f"{name}ForPrediction")(
        config_class(**_CONFIG, **extra.get(name, {}))
    )
    return model.eval()


def _inputs(batch: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    past, future = 6 + 3, 4

    def values(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator)

    return {
        "past_values": values(batch, past),
        "past_time_features": values(batch, past, 2),
        "past_observed_mask": values(batch, past) > 0.2,
        "future_time_features": values(batch, future, 2),
        "future_values": values(batch, future),
    }


_BATCH = {"past_values": {0: "batch"}, "past_time_features": {0: "batch"}}
_BATCH |= {"past_observed_mask": {0: "batch"}, "future_time_features": {0: "batch"}}
_BATCH |= {"future_values": {0: "batch"}}


@pytest.mark.parametrize("name", ["TimeSeriesTransformer", "Informer", "Autoformer"])
def test_prediction_head_loss_as_eager(name: str) -> None:
    """The loss (the distribution's log-likelihood) and the parameters, at two batches."""
    model = _model(name)
    options = onnx_export.ExportOptions(dynamic_shapes=_BATCH)
    with torch.no_grad():
        program = export_and_check(model, **_inputs(3, 0), options=options)
        assert_onnx_program_close(program, model, **_inputs(5, 1))


def test_without_the_switch_the_distribution_line_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Proof the capture patch is needed: the distribution's validation fails to capture."""
    with torch.no_grad():
        error = refused_without(
            monkeypatch,
            "distributions",
            lambda: onnx_export.dynamo_export(_model("TimeSeriesTransformer"), **_inputs(3, 0)),
        )
    first = str(error).splitlines()[0]
    assert "time_series_utils.py:" in first and "distribution_class" in first


def test_without_the_mask_skip_autoformer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof: with a mask built under export, Autoformer's attention views wrong sizes."""
    with torch.no_grad():
        error = refused_without(
            monkeypatch,
            "mask_skip",
            lambda: onnx_export.dynamo_export(_model("Autoformer"), **_inputs(3, 0)),
        )
    assert "modeling_autoformer.py:" in str(error).splitlines()[0]


class Normal(torch.nn.Module):
    def forward(self, loc: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.distributions.Normal(loc, scale.exp()).log_prob(x)


def test_a_distribution_scores_as_eager() -> None:
    model = Normal()
    program = export_and_check(model, torch.randn(4), torch.randn(4), torch.randn(4))
    assert_onnx_program_close(program, model, torch.randn(4), torch.randn(4), torch.randn(4))
    with distribution_checks_off():
        assert not torch.distributions.Distribution._validate_args
    assert torch.distributions.Distribution._validate_args  # restored
