"""``ONNXProgram``: saving, names of inputs and weights, capture failures, ``torch.cond``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torch.export import ExportedProgram

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.register_buffer("scale", torch.rand(4) + 0.5)
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.linear(x)) * self.scale
        return self.layers[1](torch.relu(self.layers[0](h)))


@pytest.fixture
def block() -> tuple[nn.Module, torch.Tensor, onnx_export.ONNXProgram]:
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(3, 4)
    return model, x, onnx_export.dynamo_export(model, x)


def _ort_run(path: Path, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    return session.run(None, {name: x.numpy()})[0]


def _expected(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(x).numpy()


# -- save ------------------------------------------------------------------------------


def test_save_writes_a_loadable_model(block: Any, tmp_path: Path) -> None:
    model, x, program = block
    written = program.save(tmp_path / "sub" / "block.onnx")  # missing folders are created
    assert written == (tmp_path / "sub" / "block.onnx").absolute()
    assert written.is_file()
    proto = onnx.load(str(written))
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["x"]
    np.testing.assert_allclose(_ort_run(written, x), _expected(model, x), rtol=1e-4, atol=1e-5)
    assert not (tmp_path / "sub" / "block.onnx.data").exists()
    # Nothing but the model is left in the folder (no staging leftovers).
    assert sorted(p.name for p in written.parent.iterdir()) == ["block.onnx"]


def test_save_with_external_data(tmp_path: Path) -> None:
    torch.manual_seed(0)
    # Weights of 256 bytes and more go to the data file (onnx_ir's threshold).
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 2)).eval()
    x = torch.randn(3, 32)
    program = onnx_export.dynamo_export(model, x)
    written = program.save(tmp_path / "block.onnx", external_data=True)
    data = tmp_path / "block.onnx.data"
    assert data.is_file()
    assert data.stat().st_size >= (32 * 64 + 64 * 2) * 4  # both weight matrices
    proto = onnx.load(str(written), load_external_data=False)
    external = {
        t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
    }
    assert {"0.weight", "2.weight"} <= external, external
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = {e.key: e.value for e in tensor.external_data}["location"]
            assert location == "block.onnx.data"
    # ORT resolves the data file relative to the model's path.
    np.testing.assert_allclose(_ort_run(written, x), _expected(model, x), rtol=1e-4, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block.onnx", "block.onnx.data"]


def test_save_under_a_file_raises_and_leaves_the_file(block: Any, tmp_path: Path) -> None:
    _, _, program = block
    blocker = tmp_path / "not_a_folder"
    blocker.write_bytes(b"precious")
    with pytest.raises(onnx_export.SerializationError) as caught:
        program.save(blocker / "model.onnx")
    assert caught.value.stage == "serialization"
    assert str(blocker / "model.onnx") in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    assert blocker.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not_a_folder"]


def test_failed_save_keeps_the_earlier_model(
    block: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, x, program = block
    target = program.save(tmp_path / "model.onnx")
    before = target.read_bytes()

    def half_written(model: ir.Model, path: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("onnx_export.program._serialize.write_streamed", half_written)
    with pytest.raises(onnx_export.SerializationError, match="No space left"):
        program.save(target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    monkeypatch.undo()
    np.testing.assert_allclose(_ort_run(target, x), _expected(model, x), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def wide() -> tuple[nn.Module, torch.Tensor, onnx_export.ONNXProgram]:
    torch.manual_seed(0)
    model = nn.Linear(32, 16).eval()  # a weight of 2 KB: external data when asked
    x = torch.randn(2, 32)
    return model, x, onnx_export.dynamo_export(model, x)


@pytest.mark.parametrize(
    ("first", "second", "left"),
    [
        (True, False, ["m.onnx"]),
        ("weights.bin", True, ["m.onnx", "m.onnx.data"]),
        (True, "weights.bin", ["m.onnx", "weights.bin"]),
        (True, True, ["m.onnx", "m.onnx.data"]),
    ],
    ids=["external-then-single", "named-then-default", "default-then-named", "same-twice"],
)
def test_saving_again_replaces_the_earlier_data_files(
    wide: Any, tmp_path: Path, first: bool | str, second: bool | str, left: list[str]
) -> None:
    model, x, program = wide
    (tmp_path / "other.data").write_bytes(b"not ours")
    (tmp_path / "other.onnx.data").write_bytes(b"not ours either")
    program.save(tmp_path / "m.onnx", external_data=first)
    written = program.save(tmp_path / "m.onnx", external_data=second)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([*left, "other.data", "other.onnx.data"])
    assert (tmp_path / "other.data").read_bytes() == b"not ours"
    loaded = onnx_export.load(written)
    np.testing.assert_allclose(loaded(x.numpy()), _expected(model, x), rtol=1e-4, atol=1e-5)


def test_small_weights_leave_no_empty_data_file(block: Any, tmp_path: Path) -> None:
    model, x, program = block  # every weight under onnx_ir's 256-byte external threshold
    written = program.save(tmp_path / "m.onnx", external_data=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    np.testing.assert_allclose(_ort_run(written, x), _expected(model, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("location", "words"),
    [
        ("ABSOLUTE", "is an absolute path; locations must be relative to the model's folder"),
        ("../w.data", "must not leave the model's folder"),
    ],
)
def test_external_data_location_errors_name_the_cause(
    wide: Any, tmp_path: Path, location: str, words: str
) -> None:
    _, _, program = wide
    if location == "ABSOLUTE":
        location = str(tmp_path / "w.data")
    with pytest.raises(onnx_export.SerializationError, match=words) as caught:
        program.save(tmp_path / "m.onnx", external_data=location)
    assert "writable" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_saving_to_a_folder_says_so(block: Any, tmp_path: Path) -> None:
    _, _, program = block
    with pytest.raises(onnx_export.SerializationError, match="is a folder") as caught:
        program.save(tmp_path)
    assert f"Is a directory ({tmp_path})" in str(caught.value)  # not a staging path


def test_reports_get_the_permissions_of_the_model_file(block: Any, tmp_path: Path) -> None:
    _, _, program = block
    old = os.umask(0o022)
    try:
        model_file = program.save(tmp_path / "m.onnx")
        report = program.save_diagnostics(tmp_path / "m.sarif")
    finally:
        os.umask(old)
    assert report.stat().st_mode & 0o777 == model_file.stat().st_mode & 0o777 == 0o644


def test_loading_a_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(FileNotFoundError, match=r"nope\.onnx") as caught:
        onnx_export.load(missing)
    assert caught.value.filename == str(missing)


# -- names -----------------------------------------------------------------------------


def test_initializers_are_named_after_the_state_dict(block: Any) -> None:
    model, _, program = block
    initializers = program.model.graph.initializers
    state = model.state_dict()
    missing = sorted(set(state) - set(initializers))
    assert not missing, f"state_dict entries without an initializer: {missing}"
    for name, tensor in state.items():
        value = initializers[name].const_value
        assert value is not None
        np.testing.assert_array_equal(value.numpy(), tensor.numpy())
    proto_names = {t.name for t in program.model_proto.graph.initializer}
    assert set(state) <= proto_names


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(
        self,
        x: torch.Tensor,
        extra: dict[str, Any],
        pair: tuple[torch.Tensor, torch.Tensor] | None = None,
        scale: float = 2.0,
    ) -> dict[str, Any]:
        assert pair is not None
        out = self.linear(x) + extra["a"] + pair[0] * pair[1]
        return {"out": out * scale, "aux": [extra["b"]["c"] * 2]}


def test_input_names_follow_forward_parameters() -> None:
    class Two(nn.Module):
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return input_ids * attention_mask

    ids, mask = torch.arange(6).reshape(2, 3), torch.ones(2, 3, dtype=torch.long)
    for call in ((ids, mask), ()):
        kwargs = {} if call else {"attention_mask": mask, "input_ids": ids}
        program = onnx_export.dynamo_export(Two(), *call, **kwargs)
        assert [v.name for v in program.model.graph.inputs] == ["input_ids", "attention_mask"]
        assert_onnx_program_close(program, Two(), ids, mask)


def test_nested_inputs_are_named_by_dotted_path() -> None:
    torch.manual_seed(0)
    model = Nested().eval()
    x = torch.randn(2, 3)
    extra = {"a": torch.randn(2, 3), "b": {"c": torch.randn(2)}}
    pair = (torch.randn(2, 3), torch.randn(2, 3))
    program = export_and_check(model, x, extra, pair=pair)
    assert [v.name for v in program.model.graph.inputs] == [
        "x",
        "extra.a",
        "extra.b.c",
        "pair.0",
        "pair.1",
    ]
    assert [v.name for v in program.model.graph.outputs] == ["out", "aux.0"]


def test_simple_nested_dict_input() -> None:
    class WithExtra(nn.Module):
        def forward(self, x: torch.Tensor, extra: dict[str, torch.Tensor]) -> torch.Tensor:
            return x * extra["a"]

    x, a = torch.randn(2, 2), torch.randn(2, 2)
    program = export_and_check(WithExtra(), x, {"a": a})
    assert [v.name for v in program.model.graph.inputs] == ["x", "extra.a"]


def test_program_metadata(block: Any) -> None:
    _, _, program = block
    assert isinstance(program.exported_program, ExportedProgram)
    assert isinstance(program.model, ir.Model)
    assert isinstance(program.model_proto, onnx.ModelProto)
    attempts = program.capture_attempts
    assert [a.strategy for a in attempts] == ["non_strict"]
    assert attempts[0].succeeded and attempts[0].exception is None
    assert "non_strict: succeeded" in attempts[0].summary()


def test_strategies_are_tried_in_the_configured_order() -> None:
    options = onnx_export.ExportOptions(capture_strategies=("strict", "non_strict"))
    program = export_and_check(nn.Linear(2, 2).eval(), torch.randn(1, 2), options=options)
    assert [a.strategy for a in program.capture_attempts] == ["strict"]


# -- capture failures and control flow ---------------------------------------------------


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_data_dependent_branch_raises_capture_error() -> None:
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(DataDependent(), torch.randn(3))
    error = caught.value
    message = str(error)
    assert "non_strict: failed" in message
    assert "strict: failed" in message.replace("non_strict: failed", "")
    assert "torch.cond" in message  # the next step it suggests
    assert error.__cause__ is not None
    assert error.stage == "capture"
    assert isinstance(error, onnx_export.OnnxExportError)


class Branching(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(
            x.sum() > 0,
            lambda t: self.linear(t) * 2,
            lambda t: t.cos() - 1,
            (x,),
        )


def test_torch_cond_matches_for_both_branches() -> None:
    torch.manual_seed(0)
    model = Branching().eval()
    program = export_and_check(model, torch.ones(3))
    assert any(node.op_type == "If" for node in program.model.graph)
    positive, negative = torch.rand(3) + 0.1, -torch.rand(3) - 0.1
    then_diff = assert_onnx_program_close(program, model, positive)
    else_diff = assert_onnx_program_close(program, model, negative)
    assert len(then_diff) == len(else_diff) == 1
    # The two branches really compute different things.
    with torch.no_grad():
        assert not torch.allclose(model.linear(positive) * 2, positive.cos() - 1)


def test_plain_function_exports() -> None:
    def function(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y + 1

    x, y = torch.randn(2, 3), torch.randn(2, 3)
    program = export_and_check(function, x, y)
    assert [v.name for v in program.model.graph.inputs] == ["x", "y"]


def test_calling_with_a_different_structure_is_a_type_error(block: Any) -> None:
    _, x, program = block
    with pytest.raises(TypeError):
        program(x, x)


def test_repr_names_inputs_outputs_and_opset(block: Any) -> None:
    _, _, program = block
    text = repr(program)
    assert "inputs=[x: float32(3, 4)]" in text and "outputs=[output: float32(3, 2)]" in text
    assert len(text) < 200
    assert "opset=" in text and "providers=['CPUExecutionProvider']" in text
    assert os.path.basename(__file__) not in text
