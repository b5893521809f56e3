"""A data-dependent capture failure in a function that also draws random numbers says so (#28).

ViLT's image embedding sizes each image's patches from ``pixel_mask`` (data-dependent)
and then keeps them in a random order with ``torch.multinomial``, in eval mode too: its
eager outputs differ from call to call, so no export can match them. The capture error's
first line names that draw (``capture/_random_draws.py``).
"""

from __future__ import annotations

import pytest
import torch

import onnx_export

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("private_temp_folder")


class _Sampled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x[torch.randperm(x.shape[0])]
        return x


class _Plain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


def _first_line(model: torch.nn.Module, *args: torch.Tensor, **kwargs: torch.Tensor) -> str:
    with pytest.raises(onnx_export.OnnxExportError) as caught:
        onnx_export.dynamo_export(model, *args, **kwargs)
    return str(caught.value).splitlines()[0]


def test_a_branch_next_to_a_random_draw_names_the_draw() -> None:
    first = _first_line(_Sampled(), torch.ones(3))
    assert "data-dependent control flow" in first
    assert "draws random numbers" in first and "torch.randperm(" in first


def test_a_branch_without_a_random_draw_says_nothing_of_it() -> None:
    first = _first_line(_Plain(), torch.ones(3))
    assert "data-dependent control flow" in first and "draws random" not in first


def test_vilt_samples_its_patches_in_eval_mode_and_the_error_says_so() -> None:
    config = transformers.ViltConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=37, image_size=30, patch_size=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.ViltModel(config).eval()
    inputs = {"input_ids": torch.randint(1, 99, (2, 7)), "pixel_values": torch.randn(2, 3, 30, 30)}
    with torch.no_grad():
        torch.manual_seed(1)
        first = model(**inputs).last_hidden_state
        torch.manual_seed(2)
        second = model(**inputs).last_hidden_state
    assert not torch.allclose(first[:, 7:], second[:, 7:])  # image rows: another order
    torch.testing.assert_close(first[:, :7], second[:, :7])  # text rows: the same
    line = _first_line(model, **inputs)
    assert "modeling_vilt.py" in line and "torch.multinomial(" in line
