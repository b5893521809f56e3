"""Exported models called as the PyTorch model was: nested inputs in, nested outputs out.

Each model is exported, saved, loaded back with ``onnx_export.load`` and called with
nested inputs (numpy and torch), then compared with eager PyTorch.
"""

from __future__ import annotations

import collections
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from torch.utils import _pytree as pytree
from transformers.modeling_outputs import BaseModelOutput

import onnx_export
from onnx_export import adapters

Pair = collections.namedtuple("Pair", "total shifted")
ROOT = pathlib.Path(__file__).resolve().parents[2]


class Nested(torch.nn.Module):
    """Positional, list, optional None, keyword-only dict and a float constant with default."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(
        self,
        x: torch.Tensor,
        cache: list[torch.Tensor],
        extra: torch.Tensor | None = None,
        *,
        mask: dict[str, torch.Tensor],
        scale: float = 2.0,
    ) -> dict[str, Any]:
        y = self.proj(x) * scale + cache[0] * cache[1]
        if extra is not None:
            y = y + extra
        y = y * mask["m"]
        return {
            "y": y,
            "pair": Pair(y.sum(-1), cache[0] - 1),
            "hidden": BaseModelOutput(last_hidden_state=y.relu()),
        }


DYNAMIC = {"x": {0: "batch"}, "cache": [{0: "batch"}, {0: "batch"}], "mask": {"m": {0: "batch"}}}


def _inputs(batch: int, seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, generator=g)
    cache = [torch.randn(batch, 3, generator=g), torch.randn(batch, 3, generator=g)]
    return (x, cache), {"mask": {"m": (torch.rand(batch, 3, generator=g) > 0.3).float()}}


def _numpy(tree: Any) -> Any:
    return pytree.tree_map(lambda t: t.numpy() if isinstance(t, torch.Tensor) else t, tree)


def _as_plain(tree: Any) -> Any:
    """Eager outputs as the adapter returns them: namedtuples and ModelOutputs as dicts."""
    if isinstance(tree, BaseModelOutput):
        return {k: _as_plain(v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return {k: _as_plain(v) for k, v in zip(tree._fields, tree, strict=True)}
    if isinstance(tree, dict):
        return {k: _as_plain(v) for k, v in tree.items()}
    return tree


def _assert_tree_close(got: Any, expected: Any, path: str = "out") -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), f"{path}: {got!r:.100}"
        for key in expected:
            _assert_tree_close(got[key], expected[key], f"{path}[{key!r}]")
        return
    expected_array = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    got_array = got.numpy() if isinstance(got, torch.Tensor) else got
    np.testing.assert_allclose(got_array, expected_array, rtol=1e-4, atol=1e-5, err_msg=path)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Nested, pathlib.Path]:
    torch.manual_seed(0)
    model = Nested().eval()
    args, kwargs = _inputs(2)
    options = onnx_export.ExportOptions(dynamic_shapes=DYNAMIC)
    program = onnx_export.dynamo_export(model, *args, export_options=options, **kwargs)
    path = program.save(tmp_path_factory.mktemp("nested") / "nested.onnx")
    return model, path


def test_program_call_returns_the_models_structure(saved: tuple[Nested, pathlib.Path]) -> None:
    model, _ = saved
    args, kwargs = _inputs(2)
    options = onnx_export.ExportOptions(dynamic_shapes=DYNAMIC)
    program = onnx_export.dynamo_export(model, *args, export_options=options, **kwargs)
    args, kwargs = _inputs(5, seed=1)
    with torch.no_grad():
        expected = _as_plain(model(*args, **kwargs))
    got = program(*args, **kwargs)
    assert isinstance(got["y"], torch.Tensor)
    _assert_tree_close(got, expected)


@pytest.mark.parametrize("batch", [1, 4, 7], ids=lambda b: f"batch{b}")
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_loaded_model_takes_nested_inputs(
    saved: tuple[Nested, pathlib.Path], batch: int, kind: str
) -> None:
    model, path = saved
    module = onnx_export.load(path)
    args, kwargs = _inputs(batch, seed=batch)
    with torch.no_grad():
        expected = _as_plain(model(*args, **kwargs))
    if kind == "numpy":
        args, kwargs = _numpy(args), _numpy(kwargs)
    got = module(*args, **kwargs)
    leaf_type = np.ndarray if kind == "numpy" else torch.Tensor
    assert all(isinstance(leaf, leaf_type) for leaf in pytree.tree_leaves(got))
    _assert_tree_close(got, expected)


def test_keyword_for_positional_and_explicit_default(saved: tuple[Nested, pathlib.Path]) -> None:
    model, path = saved
    module = onnx_export.load(path)
    (x, cache), kwargs = _inputs(3, seed=3)
    with torch.no_grad():
        expected = _as_plain(model(x, cache, **kwargs))
    got = module(x=x, cache=cache, extra=None, scale=2.0, **kwargs)
    _assert_tree_close(got, expected)


def test_allowed_classes_rebuild_the_namedtuple(saved: tuple[Nested, pathlib.Path]) -> None:
    _, path = saved
    module = onnx_export.load(path, allowed_classes=[Pair])
    args, kwargs = _inputs(2)
    got = module(*args, **kwargs)
    assert isinstance(got["pair"], Pair)
    assert isinstance(got["hidden"], dict)


@pytest.mark.parametrize(
    ("mutate", "error", "words"),
    [
        (
            lambda a, k: (a, {**k, "scale": 3.0}),
            adapters.ConstantMismatchError,
            ["scale", "2.0", "3.0"],
        ),
        (
            lambda a, k: ((a[0].double(), a[1]), k),
            adapters.InputDtypeError,
            ["x", "float32", "float64"],
        ),
        (
            lambda a, k: ((a[0], [a[1][0], a[1][1][:1]]), k),
            adapters.InputShapeError,
            ["cache[1]", "batch"],
        ),
        (lambda a, k: ((a[0][:, :2], a[1]), k), adapters.InputShapeError, ["x", "3", "2"]),
        (lambda a, k: (a, {"mask": {}}), adapters.InputStructureError, ["mask", "m"]),
        (lambda a, k: ((a[0], a[1][:1]), k), adapters.InputStructureError, ["cache"]),
        (lambda a, k: ((a[0],), k), adapters.InputBindingError, ["cache"]),
    ],
    ids=[
        "constant",
        "dtype",
        "symbolic_dim",
        "static_dim",
        "missing_key",
        "list_length",
        "missing_arg",
    ],
)
def test_bad_inputs_get_precise_errors(
    saved: tuple[Nested, pathlib.Path], mutate: Any, error: type[Exception], words: list[str]
) -> None:
    _, path = saved
    module = onnx_export.load(path)
    args, kwargs = mutate(*_inputs(3))
    with pytest.raises(error) as caught:
        module(*args, **kwargs)
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def test_loads_and_runs_without_torch(saved: tuple[Nested, pathlib.Path]) -> None:
    model, path = saved
    args, kwargs = _inputs(4, seed=4)
    with torch.no_grad():
        expected = _as_plain(model(*args, **kwargs))
    npz = path.with_suffix(".npz")
    np.savez(
        npz,
        x=args[0].numpy(),
        c0=args[1][0].numpy(),
        c1=args[1][1].numpy(),
        m=kwargs["mask"]["m"].numpy(),
        y=expected["y"].numpy(),
    )
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # any `import torch` now fails
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        import onnx_export
        d = np.load({str(npz)!r})
        out = onnx_export.load({str(path)!r})(d["x"], [d["c0"], d["c1"]], mask={{"m": d["m"]}})
        np.testing.assert_allclose(out["y"], d["y"], rtol=1e-4, atol=1e-5)
        assert type(out["pair"]) is dict and isinstance(out["y"], np.ndarray)
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ran without torch")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ran without torch" in done.stdout


def test_plain_onnx_without_metadata_runs_flat(
    saved: tuple[Nested, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    _, path = saved
    proto = onnx.load(path)
    del proto.metadata_props[:]
    plain = tmp_path / "plain.onnx"
    onnx.save(proto, plain)
    module = onnx_export.load(plain)
    assert module.spec is None
    (x, cache), kwargs = _inputs(2)
    flat = [x.numpy(), cache[0].numpy(), cache[1].numpy(), kwargs["mask"]["m"].numpy()]
    outputs = module(*flat)
    assert isinstance(outputs, list) and len(outputs) == 4


def test_tampered_metadata_is_refused(
    saved: tuple[Nested, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    _, path = saved
    proto = onnx.load(path)
    for prop in proto.metadata_props:
        if prop.key == adapters.METADATA_KEY:
            prop.value = prop.value.replace('"float32"', '"not-a-dtype"', 1)
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, bad)
    with pytest.raises(adapters.AdapterSpecError):
        onnx_export.load(bad)


class ComplexModel(torch.nn.Module):
    def forward(self, z: torch.Tensor, signal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return z * z + z, torch.fft.rfft(signal)


def test_complex_inputs_and_outputs(tmp_path: pathlib.Path) -> None:
    z = torch.randn(4, dtype=torch.complex64)
    signal = torch.randn(2, 8)
    program = onnx_export.dynamo_export(ComplexModel(), z, signal)
    module = onnx_export.load(program.save(tmp_path / "complex.onnx"))
    for call in (program, module):
        got = call(z, signal)
        expected = ComplexModel()(z, signal)
        assert isinstance(got, tuple) and got[0].dtype == torch.complex64
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    got_np = module(z.numpy(), signal.numpy())
    assert got_np[1].dtype == np.complex64
