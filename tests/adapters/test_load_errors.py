"""``load`` of a file that is no ONNX model: an ``InvalidModelError`` naming the file and the fix.

Not onnxruntime's raw ``InvalidProtobuf``/``InvalidArgument``.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import torch

import onnx_export
from onnx_export.adapters import AdapterError, InvalidModelError, OnnxModule, load


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, torch.nn.Module]:
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    path = tmp_path_factory.mktemp("load") / "model.onnx"
    onnx_export.dynamo_export(model, torch.randn(2, 16)).save(path)
    return path, model


def _write(folder: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    path = folder / name
    path.write_bytes(data)
    return path


def test_the_whole_file_loads_and_matches_eager(
    exported: tuple[pathlib.Path, torch.nn.Module],
) -> None:
    path, model = exported
    x = torch.randn(2, 16)
    np.testing.assert_allclose(
        np.asarray(load(path)(x)), model(x).detach().numpy(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("empty.onnx", lambda data: b"", "is empty (0 bytes)"),
        ("half.onnx", lambda data: data[: len(data) // 2], "is not a complete ONNX model"),
        ("random.onnx", lambda data: os.urandom(512), "is not a complete ONNX model"),
        (
            "pointer.onnx",
            lambda data: b"version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 9\n",
            "Git LFS pointer",
        ),
    ],
)
def test_a_file_that_is_no_model_is_an_invalid_model_error(
    exported: tuple[pathlib.Path, torch.nn.Module],
    tmp_path: pathlib.Path,
    name: str,
    make: object,
    says: str,
) -> None:
    data = exported[0].read_bytes()
    bad = _write(tmp_path, name, make(data))  # type: ignore[operator]
    with pytest.raises(InvalidModelError) as caught:
        onnx_export.load(bad)
    error = caught.value
    assert isinstance(error, AdapterError) and isinstance(error, ValueError)
    assert error.path == os.fspath(bad)
    text = str(error)
    assert repr(os.fspath(bad)) in text and says in text
    assert "export and save the model again" in text  # what to do
    assert "[ONNXRuntimeError]" not in text


def test_bytes_that_are_no_model_are_an_invalid_model_error() -> None:
    with pytest.raises(InvalidModelError, match="The model bytes") as caught:
        OnnxModule(b"\x08\x07garbage")
    assert caught.value.path is None
