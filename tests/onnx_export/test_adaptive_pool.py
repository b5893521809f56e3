"""Adaptive and fractional pooling: a dynamic batch (Swin, ResNet heads), dynamic sizes.

With dynamic spatial sizes each window, ``[floor(i*n/out), ceil((i+1)*n/out))``, is
computed from the size at run time; every case runs at three sizes the example did not
have, through save and load, at the default opset and at 13.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from onnx_export.errors import UnsupportedOpInputError
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")


@pytest.mark.parametrize(
    ("pool", "shape"),
    [
        pytest.param(nn.AdaptiveAvgPool2d(1), (2, 8, 5, 7), id="global-2d"),
        pytest.param(nn.AdaptiveAvgPool2d((2, 3)), (2, 8, 5, 7), id="windows-2d"),
        pytest.param(nn.AdaptiveAvgPool1d(1), (2, 8, 16), id="global-1d"),
        pytest.param(nn.AdaptiveAvgPool3d((1, 2, 2)), (2, 3, 4, 5, 6), id="windows-3d"),
    ],
)
def test_adaptive_avg_pool_with_a_dynamic_batch(pool: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    options = onnx_export.ExportOptions(dynamic_shapes={"input": {0: "batch"}})
    program = onnx_export.dynamo_export(pool, x, export_options=options)
    for batch in (2, 5):
        assert_onnx_program_close(program, pool, torch.randn(batch, *shape[1:]))


_MAX2 = nn.AdaptiveMaxPool2d((2, 3), return_indices=True)
_MAX3 = nn.AdaptiveMaxPool3d((2, 1, 3), return_indices=True)
DYNAMIC_SPATIAL = [
    pytest.param(nn.AdaptiveAvgPool1d(3), (2, 4, 10), id="avg-1d"),
    pytest.param(nn.AdaptiveAvgPool2d((2, 3)), (2, 4, 9, 10), id="avg-2d"),
    pytest.param(nn.AdaptiveAvgPool3d((2, 1, 3)), (1, 2, 5, 6, 7), id="avg-3d"),
    pytest.param(nn.AdaptiveMaxPool1d(3, return_indices=True), (2, 4, 10), id="max-1d-indices"),
    pytest.param(nn.AdaptiveMaxPool2d((3, 2)), (2, 4, 9, 10), id="max-2d"),
    pytest.param(_MAX2, (4, 9, 10), id="max-2d-indices-unbatched"),
    pytest.param(_MAX3, (1, 2, 5, 6, 7), id="max-3d-indices"),
]  # fmt: skip


def _spatial(shape: tuple[int, ...], pool: nn.Module) -> dict[int, str]:
    spatial = int(type(pool).__name__[-2])  # AdaptiveAvgPool2d -> 2
    return {axis: f"s{axis}" for axis in range(len(shape) - spatial, len(shape))}


def _grown(shape: tuple[int, ...], axes: dict[int, str], by: int) -> list[int]:
    """``shape`` with each dynamic axis grown by ``by`` (every other one by ``2 * by``)."""
    return [size + by * (1 + axis % 2) if axis in axes else size for axis, size in enumerate(shape)]


@pytest.mark.parametrize("opset", [20, 13], ids=["opset20", "opset13"])
@pytest.mark.parametrize(("pool", "shape"), DYNAMIC_SPATIAL)
def test_adaptive_pool_over_dynamic_spatial_sizes(
    pool: nn.Module, shape: tuple[int, ...], opset: int, tmp_path: Path
) -> None:
    axes = _spatial(shape, pool)
    options = onnx_export.ExportOptions(dynamic_shapes={"input": axes}, opset_version=opset)
    program = onnx_export.dynamo_export(pool, torch.randn(*shape), export_options=options)
    program.save(tmp_path / "pool.onnx")
    loaded = onnx_export.load(tmp_path / "pool.onnx")
    for by in (1, 4, 9):  # none of them the example's sizes
        x = torch.randn(*_grown(shape, axes, by))
        expected = pool(x)
        got = loaded(x)
        for want, output in zip(
            expected if isinstance(expected, tuple) else (expected,),
            got if isinstance(got, tuple) else (got,),
            strict=True,
        ):
            have = torch.as_tensor(output)
            assert have.shape == want.shape and have.dtype == want.dtype
            torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6)


def test_an_error_inside_a_sequential_points_at_the_module_with_one_next_step() -> None:
    # A function of the library that refuses its inputs (here a user's one, registered for
    # the ReLU inside a Sequential of torch's own modules, where no frame is the user's).
    def refuses(x: object) -> object:
        raise UnsupportedOpInputError("aten::relu", "static sizes", "[2, 4, h, w]")

    registry = onnx_export.OnnxRegistry()
    registry.register_op(torch.ops.aten.relu.default, refuses)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    options = onnx_export.ExportOptions(
        dynamic_shapes={"input": {2: "h", 3: "w"}}, onnx_registry=registry
    )
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(model, torch.randn(2, 3, 9, 10), export_options=options)
    message = str(caught.value)
    assert "torch/fx" not in message and "nn/modules/activation.py" in message, message
    assert "in module '1' (torch.nn.modules.activation.ReLU)" in message, message
    assert message.count("Next step") == 1, message


def test_pools_in_a_sequential_over_dynamic_sizes_are_located_at_their_modules() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveMaxPool2d((2, 2)), nn.Flatten())
    options = onnx_export.ExportOptions(dynamic_shapes={"input": {2: "h", 3: "w"}})
    program = onnx_export.dynamo_export(model, torch.randn(2, 3, 9, 10), export_options=options)
    assert_onnx_program_close(program, model, torch.randn(2, 3, 12, 7))
    sources = {
        node.metadata_props.get("pkg.onnx_export.source", "") for node in program.model.graph
    }
    assert not any("torch/fx" in source for source in sources), sources
    assert any("nn/modules/pooling.py" in source for source in sources), sources


class Fractional(nn.Module):
    def forward(self, x: torch.Tensor, samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.fractional_max_pool2d(
            x, 2, output_size=(4, 3), return_indices=True, _random_samples=samples
        )


@pytest.mark.parametrize("opset", [20, 13], ids=["opset20", "opset13"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_fractional_max_pool_over_dynamic_sizes(opset: int, batched: bool) -> None:
    # (torch.export itself makes the sizes of fractional_max_pool3d static.)
    lead = (2, 3) if batched else (3,)
    samples = torch.rand(2 if batched else 1, 3, 2)
    dims = {len(lead): "h", len(lead) + 1: "w"}
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": dims, "samples": None}, opset_version=opset
    )
    model = Fractional()
    program = onnx_export.dynamo_export(
        model, torch.randn(*lead, 9, 10), samples, export_options=options
    )
    for by in (1, 3, 6):
        assert_onnx_program_close(program, model, torch.randn(*lead, 9 + by, 10 + 2 * by), samples)
