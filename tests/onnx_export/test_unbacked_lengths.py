"""Attention and distances over a length read from data (#28).

Mistral3's Pixtral vision tower sizes its patch sequence from ``image_sizes`` (values),
Mimi its audio frames from padding computed from the input: the length is an unbacked
size under torch.export. transformers' SDPA attention then asked ``q_length > 1`` even
with a mask given (the answer cannot matter: ``capture/patches/_sdpa_causal.py``), and
``torch.cdist`` asked ``rows > 25`` though the other side's rows decide the mode
(``capture/patches/_cdist.py``), and ``unfold`` (Mistral3's patch merger) asked whether the grid's
sizes are non-zero, its own precondition (``capture/patches/_unfold.py``). Each export is
checked against eager at the example and at other values of the length.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnx_export
from tests.capture_patches import refused_without
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")


def _pixtral() -> Any:
    config = transformers.PixtralVisionConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
        image_size=30, patch_size=6, num_channels=3, hidden_act="gelu",
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.PixtralVisionModel(config).eval()


def test_pixtral_patches_sized_by_image_sizes_attend_as_eager() -> None:
    """Mistral3's vision tower: the number of patches comes from ``image_sizes``."""
    model, pixels = _pixtral(), torch.rand(2, 3, 30, 30)
    registered = transformers.AttentionInterface._global_mapping["sdpa"]
    with torch.no_grad():
        program = export_and_check(model, pixels, image_sizes=torch.tensor([[30, 30], [30, 30]]))
        for sizes in ([[24, 18], [12, 30]], [[6, 6], [30, 12]]):  # other patch counts
            assert_onnx_program_close(program, model, pixels, image_sizes=torch.tensor(sizes))
    assert transformers.AttentionInterface._global_mapping["sdpa"] is registered  # restored


def test_without_the_decision_the_sdpa_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof the capture patch is needed: transformers' own line fails to capture."""
    sizes = torch.tensor([[30, 30], [30, 30]])
    with torch.no_grad():
        error = refused_without(
            monkeypatch,
            "sdpa_causal",
            lambda: onnx_export.dynamo_export(
                _pixtral(), torch.rand(2, 3, 30, 30), image_sizes=sizes
            ),
        )
    first = str(error).splitlines()[0]
    assert "sdpa_attention.py:" in first and "q_length > 1" in first


class Quantize(torch.nn.Module):
    """Mimi's codebook lookup: distances of a data-sized set of rows to 64 codes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Parameter(torch.randn(64, 8))

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        rows = count.item()
        torch._check(rows > 0)
        distances = torch.cdist(x[:rows][None], self.embed[None], p=2)[0]
        return torch.cat([distances, distances.argmin(-1, keepdim=True).float()], -1)


def test_cdist_over_data_sized_rows_takes_eagers_mode() -> None:
    model, x = Quantize(), torch.randn(40, 8)
    program = export_and_check(model, x, torch.tensor(7))
    for count in (1, 25, 26, 40):  # both sides of eager's 25-row threshold on this side
        assert_onnx_program_close(program, model, x, torch.tensor(count))
    assert torch.cdist.__module__ == "torch.functional"  # restored after capture


def test_without_the_mode_the_cdist_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    error = refused_without(
        monkeypatch,
        "cdist",
        lambda: onnx_export.dynamo_export(Quantize(), torch.randn(40, 8), torch.tensor(7)),
    )
    first = str(error).splitlines()[0]
    assert "test_unbacked_lengths.py:" in first and "torch.cdist" in first


class PatchMerger(torch.nn.Module):
    """Mistral3's patch merger on the patches of ``image_sizes`` (a count read from data,
    as Pixtral's tower gives it): ``unfold`` of each image's grid of patches."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.Mistral3Config(
            vision_config={"model_type": "pixtral", "hidden_size": 8, "patch_size": 6},
            spatial_merge_size=2,
        )
        torch.manual_seed(0)
        modeling = transformers.models.mistral3.modeling_mistral3
        self.merger = modeling.Mistral3PatchMerger(config).eval()

    def forward(self, patches: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        count = (image_sizes // 6).prod(-1).sum().item()
        torch._check(count <= patches.shape[0])
        return self.merger(patches[:count], image_sizes)


def test_mistral3_patch_merger_unfolds_grids_sized_by_image_sizes() -> None:
    """``unfold`` states its own precondition (non-zero sizes, a block per axis)."""
    model, patches = PatchMerger(), torch.randn(50, 8)
    with torch.no_grad():
        program = export_and_check(model, patches, torch.tensor([[30, 30], [30, 30]]))
        for sizes in ([[24, 18], [12, 30]], [[12, 12], [30, 24]]):
            assert_onnx_program_close(program, model, patches, torch.tensor(sizes))
    assert torch.nn.functional.unfold.__module__ == "torch.nn.functional"  # restored


def test_without_the_preconditions_the_unfold_line_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes = torch.tensor([[30, 30], [30, 30]])
    with torch.no_grad():
        error = refused_without(
            monkeypatch,
            "unfold",
            lambda: onnx_export.dynamo_export(PatchMerger(), torch.randn(50, 8), sizes),
        )
    first = str(error).splitlines()[0]
    assert "modeling_mistral3.py:" in first and "unfold" in first


class SqueezeWhereOne(torch.nn.Module):
    """``squeeze(0)`` of a data-sized count (Mistral3's projected image features) and of 3."""

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = x[keep > 0]  # (u0, 4): u0 is read from the data
        return rows.squeeze(0) * 2, x.squeeze(0) + 1  # torch squeezes neither


def test_squeeze_of_a_size_other_than_one_is_no_squeeze() -> None:
    # torchlib's Squeeze was unconditional: the file's checker saw rank 1 where the
    # program had 2, and refused the file (Mistral3: "invalid file").
    model, x = SqueezeWhereOne(), torch.randn(3, 4)
    program = onnx_export.dynamo_export(model, x, torch.tensor([1, 0, 1]))
    for keep in ([1, 0, 1], [1, 1, 1], [0, 1, 1]):
        got = program(x, torch.tensor(keep))
        want = model(x, torch.tensor(keep))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
