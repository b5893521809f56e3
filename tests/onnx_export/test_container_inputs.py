"""Inputs in every container torch.export accepts, with dynamic dims in every spec form.

A NamedTuple takes its own class, a tuple, a dict of fields or dotted names; a dataclass its
class, a dict of fields, a list or dotted names; a registered pytree class a list or a dict
by key; containers nest. Each export runs in ONNX Runtime against eager at the example,
at another size and at size 1; the same names work on the command line (``--dynamic``,
``run``'s inputs, ``info``). Binding errors say what ``forward`` takes.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.utils import _pytree as pytree

import onnx_export
from onnx_export.cli import main
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


@dataclasses.dataclass
class Batch:
    ids: torch.Tensor
    mask: torch.Tensor


torch.export.register_dataclass(Batch)


class Window:
    """A class of the user's, registered with torch's pytree (keys by attribute)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys, self.values = keys, values


pytree.register_pytree_node(
    Window,
    lambda w: ([w.keys, w.values], None),
    lambda children, _: Window(*children),
    flatten_with_keys_fn=lambda w: (
        [(pytree.GetAttrKey("keys"), w.keys), (pytree.GetAttrKey("values"), w.values)],
        None,
    ),
)


class PairModel(nn.Module):
    def forward(self, pair: Pair) -> torch.Tensor:
        return pair.left * 2 + pair.right.softmax(-1)


class BatchModel(nn.Module):
    def forward(self, batch: Batch) -> torch.Tensor:
        return (batch.ids * batch.mask).cumsum(0)


class WindowModel(nn.Module):
    def forward(self, window: Window) -> torch.Tensor:
        return window.keys @ window.values.transpose(0, 1)


class Mixed(nn.Module):
    def forward(self, items: dict[str, Any]) -> torch.Tensor:
        pair, batch = items["pairs"][0], items["batch"]
        return pair.left + pair.right + batch.ids * batch.mask


def _pair(n: int) -> Pair:
    return Pair(torch.randn(n, 4), torch.randn(n, 4))


def _batch(n: int) -> Batch:
    return Batch(torch.randn(n, 4), torch.randn(n, 4))


def _window(n: int) -> Window:
    return Window(torch.randn(n, 4), torch.randn(n, 4))


def _mixed(n: int) -> dict[str, Any]:
    return {"pairs": [_pair(n)], "batch": _batch(n)}


_B = Dim("b")
CASES = [
    pytest.param(PairModel, _pair, {"pair": Pair({0: _B}, {0: _B})}, id="namedtuple-class-dim"),
    pytest.param(PairModel, _pair, {"pair": Pair({0: "b"}, {0: "b"})}, id="namedtuple-class"),
    pytest.param(PairModel, _pair, {"pair": ({0: "b"}, {0: "b"})}, id="namedtuple-tuple"),
    pytest.param(
        PairModel, _pair, {"pair": {"left": {0: "b"}, "right": {0: "b"}}}, id="namedtuple-dict"
    ),
    pytest.param(
        PairModel, _pair, {"pair.left": {0: "b"}, "pair.right": {0: "b"}}, id="namedtuple-dotted"
    ),
    pytest.param(BatchModel, _batch, {"batch": Batch({0: "b"}, {0: "b"})}, id="dataclass-class"),
    pytest.param(BatchModel, _batch, {"batch": Batch({0: _B}, {0: _B})}, id="dataclass-dim"),
    pytest.param(
        BatchModel, _batch, {"batch": {"ids": {0: "b"}, "mask": {0: "b"}}}, id="dataclass-dict"
    ),
    pytest.param(BatchModel, _batch, {"batch": [{0: "b"}, {0: "b"}]}, id="dataclass-list"),
    pytest.param(
        BatchModel, _batch, {"batch.ids": {0: "b"}, "batch.mask": {0: "b"}}, id="dataclass-dotted"
    ),
    pytest.param(WindowModel, _window, {"window": [{0: "b"}, {0: "b"}]}, id="registered-list"),
    pytest.param(
        WindowModel,
        _window,
        {"window": {"keys": {0: "b"}, "values": {0: "b"}}},
        id="registered-dict",
    ),
    pytest.param(
        Mixed,
        _mixed,
        {"items": {"pairs": [Pair({0: "b"}, {0: "b"})], "batch": Batch({0: "b"}, {0: "b"})}},
        id="nested-mix",
    ),
    pytest.param(
        Mixed,
        _mixed,
        {
            "items.pairs.0.left": {0: "b"},
            "items.pairs.0.right": {0: "b"},
            "items.batch.ids": {0: "b"},
            "items.batch.mask": {0: "b"},
        },
        id="nested-mix-dotted",
    ),
]


@pytest.mark.parametrize(("model_class", "make", "shapes"), CASES)
def test_container_inputs_take_every_spec_form(model_class: type, make: Any, shapes: Any) -> None:
    model = model_class()
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    program = onnx_export.dynamo_export(model, make(3), export_options=options)
    for value in program.model.graph.inputs:
        assert value.shape is not None and str(value.shape[0]) == "b", value.shape
    for n in (3, 6, 1):
        assert_onnx_program_close(program, model, make(n))


class SumLeft(nn.Module):
    def forward(self, pair: Pair) -> torch.Tensor:
        return pair.left.sum(0) + pair.right


def test_dotted_names_are_the_graph_names() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"pair": Pair({0: "b"}, None)})
    model = SumLeft()
    program = onnx_export.dynamo_export(model, _pair(3), export_options=options)
    assert_onnx_program_close(program, model, Pair(torch.randn(6, 4), torch.randn(3, 4)))
    assert [v.name for v in program.model.graph.inputs] == ["pair.left", "pair.right"]
    assert [str(d) for d in program.model.graph.inputs[1].shape or ()] == ["3", "4"]
    with pytest.raises(onnx_export.adapters.InputShapeError):
        program(Pair(torch.randn(3, 4), torch.randn(5, 4)))


def test_a_named_tuple_input_is_not_called_a_torch_onnx_habit() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"pair.0": {0: "b"}})
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(PairModel(), _pair(3), export_options=options)
    text = str(caught.value)
    assert "torch.onnx.export" not in text
    assert "its leaves are ['pair.left', 'pair.right']" in text
    assert "forward(pair) takes pair = a namedtuple Pair(left, right)." in text


@pytest.mark.parametrize(
    ("shapes", "fragment"),
    [
        pytest.param({"pair": {"middle": {0: "b"}}}, "fields are ['left', 'right']", id="field"),
        pytest.param({"pair": [{0: "b"}]}, "1 entries for an input with 2", id="count"),
        pytest.param({"pair": {0: "b"}}, "that the input does not have", id="axes-for-pair"),
    ],
)
def test_spec_errors_say_what_the_input_takes(shapes: Any, fragment: str) -> None:
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(PairModel(), _pair(3), export_options=options)
    text = str(caught.value)
    assert fragment in text
    assert "forward(pair) takes pair = a namedtuple Pair(left, right)." in text
    assert "torch.onnx.export" not in text


def test_a_plain_tuple_of_tensors_still_gets_the_torch_onnx_hint() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    with pytest.raises(onnx_export.ExportInputError, match=r"the way torch\.onnx\.export takes"):
        onnx_export.dynamo_export(Two(), (torch.randn(2), torch.randn(2)))


FACTORIES = """
import dataclasses
from typing import NamedTuple

import torch


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


class PairModel(torch.nn.Module):
    def forward(self, pair: Pair) -> torch.Tensor:
        return pair.left * 2 + pair.right


@dataclasses.dataclass
class CliBatch:
    ids: torch.Tensor
    mask: torch.Tensor


torch.export.register_dataclass(CliBatch)


class BatchModel(torch.nn.Module):
    def forward(self, batch: CliBatch) -> torch.Tensor:
        return batch.ids * batch.mask


def pair():
    return PairModel(), (Pair(torch.randn(3, 4), torch.randn(3, 4)),)


def batch():
    return BatchModel(), (CliBatch(torch.randn(3, 4), torch.randn(3, 4)),)
"""


@pytest.mark.parametrize(
    ("factory", "names", "combine"),
    [
        pytest.param("pair", ("pair.left", "pair.right"), lambda a, b: a * 2 + b, id="namedtuple"),
        pytest.param("batch", ("batch.ids", "batch.mask"), lambda a, b: a * b, id="dataclass"),
    ],
)
def test_cli_export_info_run_by_dotted_names(
    factory: str,
    names: tuple[str, str],
    combine: Any,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "container_factories.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    dynamic = [arg for name in names for arg in ("--dynamic", f"{name}:0=b")]
    argv = ["export", f"container_factories:{factory}", "-o", "m.onnx", *dynamic]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["info", "m.onnx"]) == 0
    info = capsys.readouterr().out
    for name in names:
        assert any(
            line.split(maxsplit=1) == [name, "float32[b, 4]"] for line in info.splitlines()
        ), info
    for n in (5, 1):
        a, b = (np.random.default_rng(n).standard_normal((n, 4), np.float32) for _ in range(2))
        np.savez(tmp_path / "in.npz", **{names[0]: a, names[1]: b})
        assert main(["run", "m.onnx", "--inputs", "in.npz", "--output", "out.npz"]) == 0, (
            capsys.readouterr().err
        )
        with np.load(tmp_path / "out.npz") as out:
            np.testing.assert_allclose(out["output"], combine(a, b), rtol=1e-5, atol=1e-6)


@dataclasses.dataclass
class Unregistered:
    ids: torch.Tensor


class UnregisteredModel(nn.Module):
    def forward(self, batch: Unregistered) -> torch.Tensor:
        return batch.ids * 2


def test_an_unregistered_dataclass_is_told_to_register() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"batch.ids": {0: "b"}})
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(
            UnregisteredModel(), Unregistered(torch.randn(3, 4)), export_options=options
        )
    text = str(caught.value)
    assert "torch.export.register_dataclass(Unregistered)" in text
    assert "a dataclass Unregistered(ids), not registered with torch's pytree" in text


@pytest.mark.parametrize("nested", [False, True], ids=["direct", "in-a-dict"])
def test_an_unregistered_dataclass_is_refused_before_capture_without_dynamic_shapes(
    nested: bool,
) -> None:
    """torch.export refuses it in every strategy: say so at once, with the registration."""
    example = Unregistered(torch.randn(3, 4))
    model, args, path = UnregisteredModel(), (example,), "'batch'"
    if nested:

        class DictModel(nn.Module):
            def forward(self, inputs: dict[str, Any]) -> torch.Tensor:
                return inputs["batch"].ids * 2

        model, args, path = DictModel(), ({"batch": example},), "'inputs.batch'"
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(model, *args)
    text = str(caught.value)
    assert f"input {path} is a dataclass Unregistered(ids)" in text, text
    assert "torch.export.register_dataclass(Unregistered)" in text
    assert "every strategy failed" not in text


def test_a_numpy_array_input_is_refused_before_capture_naming_torch_from_numpy() -> None:
    model = nn.Linear(4, 2)
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(model, np.ones((3, 4), np.float32))
    text = str(caught.value)
    assert "input 'input' is a numpy array (float32, shape [3, 4])" in text, text
    assert "torch.from_numpy" in text and "every strategy failed" not in text


def test_a_numpy_scalar_input_still_exports_as_a_constant() -> None:
    class Scale(nn.Module):
        def forward(self, x: torch.Tensor, scale: Any) -> torch.Tensor:
            return x * scale

    x = torch.randn(2, 3)
    program = onnx_export.dynamo_export(Scale(), x, np.float64(2.0))
    torch.testing.assert_close(program(x, np.float64(2.0)), x * 2.0)


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr"])
def test_a_sparse_input_is_refused_before_capture_naming_to_dense(layout: str) -> None:
    class Dense(nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(x, w)

    x, w = torch.eye(3), torch.randn(3, 2)
    sparse = x.to_sparse() if layout == "sparse_coo" else x.to_sparse_csr()
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(Dense(), sparse, w)
    text = str(caught.value)
    assert f"input 'x' is a {layout} tensor of shape [3, 3]" in text, text
    assert ".to_dense()" in text and "every strategy failed" not in text
    # What the message says to do exports, and the file matches eager.
    program = onnx_export.dynamo_export(Dense(), x, w)
    torch.testing.assert_close(program(x, w), Dense()(x, w))
