"""The cache reordered and cut where it lives: numpy on the CPU, ONNX Runtime ops on a device.

A device's path (``Gather``/``Slice`` sessions on the session's provider, outputs bound to
its device) is run here on the CPU provider (``cache_ops.on_host = False``): it must give the
numpy path's bits, and generation must give the same tokens on either path (and
transformers' tokens). bfloat16, which numpy lacks, runs on the CPU through
``upcast=["bfloat16"]``, its cache reordered as 16-bit patterns.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnxruntime.capi import _pybind_state as _C

from onnx_export import hf
from onnx_export.adapters import MissingKernelError
from onnx_export.cli import main
from onnx_export.hf.runtime._cache_ops import CacheOps, host_bits
from tests.hf.checkpoints import CASES
from tests.hf.conftest import Exported

_CPU = _C.OrtDevice(_C.OrtDevice.cpu(), _C.OrtDevice.default_memory(), 0)


def _value(dtype: str) -> tuple[Any, np.ndarray]:
    """A (3, 2, 5, 4) cache value of ``dtype`` and its bits as numpy."""
    generator = np.random.default_rng(0)
    if dtype == "bfloat16":
        bits = generator.integers(0, 0x7F80, (3, 2, 5, 4)).astype(np.uint16)  # finite patterns
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, 16)._ortvalue, bits
    array = generator.standard_normal((3, 2, 5, 4)).astype(dtype)
    return _C.OrtValue.ortvalue_from_numpy(array, _CPU), array


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("on_host", [True, False], ids=["numpy", "onnxruntime-ops"])
def test_rows_and_positions_are_the_bits_numpy_takes(dtype: str, on_host: bool) -> None:
    value, bits = _value(dtype)
    ops = CacheOps(["CPUExecutionProvider"], _CPU, on_host)
    rows = ops.take_rows(value, np.array([2, 0, 0]))
    cut = ops.first_positions(value, 3)
    for got, want in ((rows, bits[[2, 0, 0]]), (cut, bits[:, :, :3])):
        assert got.data_type() == value.data_type()
        np.testing.assert_array_equal(host_bits(got), want)


def _device_path(model: hf.OrtModelForCausalLM) -> hf.OrtModelForCausalLM:
    model.session.cache_ops.on_host = False  # what a CUDA session does, on the CPU provider
    return model


MODES: dict[str, dict[str, Any]] = {
    "greedy": {"max_new_tokens": 8},
    "beams": {"num_beams": 3, "max_new_tokens": 8},
    "beams-return-2": {"num_beams": 4, "num_return_sequences": 2, "max_new_tokens": 6},
    "sampling": {"do_sample": True, "top_k": 20, "seed": 3, "max_new_tokens": 8},
}


@pytest.mark.parametrize("mode", MODES)
def test_generation_tokens_are_the_same_on_either_path(
    exported: Callable[[str], Exported], mode: str
) -> None:
    case = exported("llama")
    ids = torch.randint(2, 90, (2, 7), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # row 1 is left-padded
    kwargs = MODES[mode]
    host = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    device = _device_path(hf.OrtModelForCausalLM.from_pretrained(case.folder))
    ours = host.generate(ids.numpy(), mask.numpy(), pad_token_id=0, **kwargs)
    np.testing.assert_array_equal(
        device.generate(ids.numpy(), mask.numpy(), pad_token_id=0, **kwargs), ours
    )
    if not kwargs.get("do_sample"):
        with torch.no_grad():
            theirs = case.model.generate(
                ids, attention_mask=mask, do_sample=False, pad_token_id=0, **kwargs
            )
        np.testing.assert_array_equal(ours, theirs.numpy())


@pytest.fixture(scope="module")
def bfloat16_folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("bf16")
    CASES["llama"].save(root / "ckpt")
    assert main(["hf", str(root / "ckpt"), "-o", str(root / "out"), "--dtype", "bfloat16"]) == 0
    return root


def test_bfloat16_folder_on_the_cpu_names_upcast(bfloat16_folder: pathlib.Path) -> None:
    with pytest.raises(MissingKernelError, match=r"upcast=\['bfloat16'\]"):
        hf.OrtModelForCausalLM.from_pretrained(bfloat16_folder / "out")


@pytest.mark.parametrize("on_host", [True, False], ids=["numpy", "onnxruntime-ops"])
def test_bfloat16_beam_search_runs_on_the_cpu_with_upcast(
    bfloat16_folder: pathlib.Path, on_host: bool
) -> None:
    """bfloat16 pasts (bfloat16 between steps) reordered by beam search: transformers' beams.

    The upcast graph computes in float32 and rounds its outputs to bfloat16; torch's
    bfloat16 kernels round at other points, which could flip a near tie (none on this prompt).
    """
    model = hf.OrtModelForCausalLM.from_pretrained(bfloat16_folder / "out", upcast=["bfloat16"])
    model.session.cache_ops.on_host = on_host
    ids = np.array([[1, 5, 9, 22, 40, 7]])
    beams = model.generate(ids, max_new_tokens=6, num_beams=3)
    assert model.session.input_meta("past_key_values.0.key").type == "tensor(bfloat16)"
    import transformers as tf

    reference = tf.AutoModelForCausalLM.from_pretrained(
        bfloat16_folder / "ckpt", dtype=torch.bfloat16
    ).eval()
    with torch.no_grad():
        want = reference.generate(torch.tensor(ids), max_new_tokens=6, num_beams=3, do_sample=False)
    np.testing.assert_array_equal(beams, want.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_logits_come_to_the_host_widened_exactly(dtype: str) -> None:
    """A device's logits (any float dtype) reach numpy as float32 through a ``Cast`` run."""
    value, bits = _value(dtype)
    want = bits.astype(np.uint32) << 16 if dtype == "bfloat16" else bits
    want = want.view(np.float32) if dtype == "bfloat16" else want.astype(np.float32)
    got = CacheOps(["CPUExecutionProvider"], _CPU, on_host=False).to_host_float32(value)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
