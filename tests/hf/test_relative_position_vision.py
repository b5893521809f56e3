"""Vision models whose relative-position tables and windows follow the image size.

BEiT (and Data2VecVision, its kin) size a relative-position bias table from the image's
patch grid with transformers' ``torch_int``. Captured, the table must follow the image,
not the example: the file runs at the example's image size and at another one, against
eager, through ``dynamo_export`` and through ``onnx-export hf``. SwinV2 pads its patch
grid to whole windows (and to even sizes before merging patches) only where the image
needs it: a file captured at an example that needs no padding must not claim the sizes
that do (the export's own check runs a second size the file accepts, a multiple of the
patch size).
"""

from __future__ import annotations

import os
import pathlib
import warnings
from typing import Any

import pytest
import torch
import transformers as tf

import onnx_export
from onnx_export.adapters import InputShapeError
from onnx_export.cli import main
from onnx_export.hf.export.graphs._vision import VisionHead

_VISION = {"image_size": 32, "num_channels": 3, "num_labels": 5}
_VIT = {
    **_VISION,
    "patch_size": 8,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}

CONFIGS = {
    "beit": lambda: tf.BeitConfig(**_VIT, use_relative_position_bias=True),
    "beit-shared": lambda: tf.BeitConfig(**_VIT, use_shared_relative_position_bias=True),
    "data2vec-vision": lambda: tf.Data2VecVisionConfig(**_VIT, use_relative_position_bias=True),
}
#: Stages of one layer each: no shifted windows; padding where a stage's grid is odd.
_SWINV2 = {
    **_VISION,
    "patch_size": 4,
    "embed_dim": 16,
    "depths": [1, 1],
    "num_heads": [1, 2],
    "window_size": 2,
}
CONFIGS["swinv2"] = lambda: tf.Swinv2Config(**_SWINV2)
#: Slow under a loaded CI machine (several captures): with --runslow only.
_SLOW = {"beit-shared", "swinv2"}  # swinv2: a re-capture at padded sizes, minutes each


def _skip_unless_slow(request: pytest.FixtureRequest, name: str) -> None:
    if name not in _SLOW:
        return
    if not request.config.getoption("--runslow", default=False) and (
        os.environ.get("ONNX_EXPORT_RUNSLOW") != "1"
    ):
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")


def _model(name: str) -> Any:
    torch.manual_seed(0)
    return tf.AutoModelForImageClassification.from_config(CONFIGS[name]()).eval()


def _assert_matches(run: Any, model: Any, batch: int, size: int) -> None:
    pixels = torch.randn(batch, 3, size, size)
    with torch.no_grad():
        want = model(pixel_values=pixels).logits
    got = torch.as_tensor(run(pixel_values=pixels)["logits"])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["beit", "beit-shared", "data2vec-vision"])
def test_dynamo_export_serves_other_image_sizes(name: str, request: pytest.FixtureRequest) -> None:
    _skip_unless_slow(request, name)
    model = _model(name)
    shapes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the narrowed lower bound is warned: its own test
        program = onnx_export.dynamo_export(
            VisionHead(model, ("logits",)),
            torch.randn(2, 3, 32, 32),
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )
    assert program.adapter_spec.inputs[0].tensor.shape[2:] == ("height", "width")
    _assert_matches(program, model, 2, 32)  # the example's size
    _assert_matches(program, model, 3, 48)  # a larger image: a larger table
    _assert_matches(program, model, 1, 64)


def test_onnx_export_hf_serves_other_image_sizes(tmp_path: pathlib.Path) -> None:
    model = _model("beit")
    model.save_pretrained(tmp_path / "checkpoint")
    assert main(["hf", str(tmp_path / "checkpoint"), "-o", str(tmp_path / "onnx")]) == 0
    loaded = onnx_export.load(tmp_path / "onnx" / "model.onnx")
    _assert_matches(loaded, model, 2, 32)
    _assert_matches(loaded, model, 1, 48)
    with pytest.raises(InputShapeError, match="height"):  # below the table's smallest
        loaded(pixel_values=torch.randn(1, 3, 4, 4))


def test_swinv2_dynamo_export_serves_padded_image_sizes(request: pytest.FixtureRequest) -> None:
    """The example (32 px: grids of 8 and 4) pads nothing; 40 and 44 px pad (odd grids)."""
    _skip_unless_slow(request, "swinv2")
    model = _model("swinv2")
    shapes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the patch size's multiple is warned: its own test
        program = onnx_export.dynamo_export(
            VisionHead(model, ("logits",)),
            torch.randn(2, 3, 32, 32),
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )
    assert program.adapter_spec.inputs[0].tensor.shape[2:] == ("height", "width")
    _assert_matches(program, model, 2, 32)  # the example's size
    _assert_matches(program, model, 3, 40)  # a 5x5 grid in the second stage: padded
    _assert_matches(program, model, 2, 44)  # 11x11 patches: padded to whole windows
    with pytest.raises(InputShapeError, match="height"):  # not a multiple of the patch size
        program(pixel_values=torch.randn(2, 3, 42, 44))


def test_swinv2_onnx_export_hf_serves_padded_image_sizes(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    _skip_unless_slow(request, "swinv2")
    model = _model("swinv2")
    model.save_pretrained(tmp_path / "checkpoint")
    assert main(["hf", str(tmp_path / "checkpoint"), "-o", str(tmp_path / "onnx")]) == 0
    loaded = onnx_export.load(tmp_path / "onnx" / "model.onnx")
    _assert_matches(loaded, model, 2, 32)
    _assert_matches(loaded, model, 2, 36)  # 9x9 patches: padded to whole windows
    _assert_matches(loaded, model, 3, 40)
