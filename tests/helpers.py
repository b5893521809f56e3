"""Shared helpers for the exporter tests: export, run in ONNX Runtime, compare with eager."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import onnx
import pytest
import torch
from torch.utils import _pytree as pytree

import onnx_export


def _eager_leaves(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        outputs = model(*args, **kwargs)
    return [leaf for leaf in pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor)]


def _clone_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    # In-place models must not change the inputs the other side sees.
    return pytree.tree_map(
        lambda v: v.clone() if isinstance(v, torch.Tensor) else v, (args, kwargs)
    )


def assert_onnx_program_close(
    program: onnx_export.ONNXProgram,
    model: Any,
    *args: Any,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **kwargs: Any,
) -> list[float]:
    """Run ``model`` eagerly and ``program`` in ONNX Runtime on the same inputs; compare.

    The program returns the model's own output structure (its adapter rebuilds it): plain
    dicts keep their keys, tuples and lists their length. Then it compares the number of
    tensor outputs, then each output's shape, dtype and values (floats within
    ``rtol``/``atol``; bool and integer outputs exactly).

    Returns:
        The max absolute difference of each output (0.0 for exact matches).
    """
    eager_args, eager_kwargs = _clone_inputs(args, kwargs)
    expected = _eager_leaves(model, eager_args, eager_kwargs)
    onnx_args, onnx_kwargs = _clone_inputs(args, kwargs)
    result = program(*onnx_args, **onnx_kwargs)
    _assert_same_container(result, model, args, kwargs)
    actual = [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    assert len(actual) == len(expected), (
        f"ONNX returned {len(actual)} outputs, eager returned {len(expected)}"
    )
    diffs: list[float] = []
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got.shape == want.shape, (
            f"output {i}: shape {tuple(got.shape)} != {tuple(want.shape)}"
        )
        assert got.dtype == want.dtype, f"output {i}: dtype {got.dtype} != {want.dtype}"
        exact = want.dtype == torch.bool or not (want.is_floating_point() or want.is_complex())
        if exact:
            torch.testing.assert_close(
                got, want, rtol=0, atol=0, msg=lambda m, i=i: f"output {i}: {m}"
            )
            diffs.append(0.0)
            continue
        torch.testing.assert_close(
            got, want, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m, i=i: f"output {i}: {m}"
        )
        diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
        diffs.append(float(diff.nan_to_num(0.0).max()) if diff.numel() else 0.0)
    return diffs


def export_and_check(
    model: Any,
    *args: Any,
    options: onnx_export.ExportOptions | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **kwargs: Any,
) -> onnx_export.ONNXProgram:
    """Export ``model``, check the ONNX model (full check), run it and compare with eager."""
    export_args, export_kwargs = _clone_inputs(args, kwargs)
    program = onnx_export.dynamo_export(
        model, *export_args, export_options=options, **export_kwargs
    )
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert_onnx_program_close(program, model, *args, rtol=rtol, atol=atol, **kwargs)
    return program


@pytest.fixture
def private_temp_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Keep what the exporter writes to the temp folder (e.g. the SARIF report of a
    failed export) in a pytest-managed folder instead of the system's /tmp.

    Separate from ``tmp_path`` so that tests can list ``tmp_path`` exactly. Test modules
    whose exports fail on purpose opt in with
    ``pytestmark = pytest.mark.usefixtures("private_temp_folder")``.
    """
    folder = tmp_path_factory.mktemp("system-temp")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield


def _assert_same_container(result: Any, model: Any, args: Any, kwargs: Any) -> None:
    """Plain dict/tuple/list outputs come back as the same container with the same keys."""
    eager_args, eager_kwargs = _clone_inputs(args, kwargs)
    with torch.no_grad():
        eager = model(*eager_args, **eager_kwargs)
    if type(eager) is dict:
        assert isinstance(result, dict) and list(result) == list(eager), (
            f"expected a dict with keys {list(eager)}, got {type(result).__name__}"
        )
    elif type(eager) in (tuple, list):
        assert type(result) is type(eager) and len(result) == len(eager), (
            f"expected a {type(eager).__name__} of {len(eager)}, got {result!r:.80}"
        )


def torch_has_op(key: str) -> bool:
    """Whether the installed torch defines the ATen op ``key`` (``"aten::cholesky"``, ...).

    Newer torch releases remove ops (torch 2.14 removed ``aten::cholesky``); tests of our
    functions for them skip there, and keep running on the torch versions that have them.
    """
    namespace, _, rest = key.partition("::")
    if namespace != "aten":  # a library's ops register when the library is imported
        return True
    name, _, overload = rest.split(" ")[0].partition(".")
    packet = getattr(getattr(torch.ops, namespace), name, None)
    if packet is None:
        return False
    return not overload or overload in packet.overloads()
