"""Large models: fake/meta exports with weights attached at save, external data, streaming
saves, atomicity, reproducible bytes and progress bars (on a tiny Llama, CI-sized)."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import onnx
import onnx_ir as ir
import pytest
import torch
from onnx_ir.tensor_adapters import TorchTensor
from safetensors.torch import save_file

import onnx_export
from onnx_export._dtypes import to_ir_dtype
from onnx_export._fake import WeightPlaceholder, weight_values
from onnx_export._progress import ProgressBar, translation_progress
from onnx_export.program import _serialize
from tests.helpers import assert_onnx_program_close

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("private_temp_folder")

_CONFIG = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "max_position_embeddings": 64,
    "use_cache": False,
}


class Logits(torch.nn.Module):
    """A causal LM called with ``input_ids`` only, returning its logits."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids, use_cache=False).logits  # type: ignore[no-any-return]


def _llama(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return Logits(transformers.LlamaForCausalLM(transformers.LlamaConfig(**_CONFIG))).eval()


def _ids(batch: int = 2, length: int = 8) -> torch.Tensor:
    return torch.randint(0, _CONFIG["vocab_size"], (batch, length))


def _export(model: torch.nn.Module, ids: torch.Tensor, **options: Any) -> onnx_export.ONNXProgram:
    return onnx_export.dynamo_export(
        model, ids, export_options=onnx_export.ExportOptions(**options)
    )


@pytest.fixture(scope="module")
def real() -> torch.nn.Module:
    return _llama()


@pytest.fixture(scope="module")
def buffers(real: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The non-persistent buffers (rotary inv_freq): no state_dict or checkpoint has them."""
    return dict(real.named_buffers())


@pytest.fixture(scope="module")
def real_program(real: torch.nn.Module) -> onnx_export.ONNXProgram:
    return _export(real, _ids())


@pytest.fixture(scope="module")
def fake_program() -> onnx_export.ONNXProgram:
    with onnx_export.enable_fake_mode():
        model = _llama()
        ids = _ids()
    return _export(model, ids)


@pytest.fixture(scope="module")
def meta_program() -> onnx_export.ONNXProgram:
    with torch.device("meta"):
        model = _llama()
    return _export(model, _ids())


@pytest.fixture(scope="module")
def checkpoint(real: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("checkpoint") / "model.safetensors"
    save_file(real.state_dict(), str(path))
    return path


@pytest.fixture(scope="module")
def shards(real: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("shards")
    items = sorted(real.state_dict().items())
    half = len(items) // 2
    save_file(dict(items[:half]), str(folder / "model-00001-of-00002.safetensors"))
    save_file(dict(items[half:]), str(folder / "model-00002-of-00002.safetensors"))
    return folder


def _check_in_ort(path: pathlib.Path, model: torch.nn.Module, ids: torch.Tensor) -> None:
    onnx.checker.check_model(str(path))
    assert_onnx_program_close(onnx_export.load(path), model, ids)  # type: ignore[arg-type]


# -- fake and meta exports ---------------------------------------------------------------------


@pytest.mark.parametrize("which", ["fake", "meta"])
def test_weights_are_placeholders_named_after_the_state_dict(
    which: str, request: pytest.FixtureRequest, real: torch.nn.Module
) -> None:
    program = request.getfixturevalue(f"{which}_program")
    initializers = weight_values(program.model)  # folded weights (q_proj.weight.T) by source
    for name, tensor in real.state_dict().items():
        data = initializers[name].const_value
        assert isinstance(data, WeightPlaceholder), name
        assert list(data.shape) == list(tensor.shape), name
        assert data.dtype == to_ir_dtype(tensor.dtype), name
    with pytest.raises(ValueError, match="model_state"):
        data.numpy()


@pytest.mark.parametrize(
    ("which", "source"),
    [
        ("fake", "state_dict"),
        ("fake", "safetensors"),
        ("meta", "state_dict"),
        ("meta", "shards"),
    ],
)
def test_saved_with_real_weights_matches_eager(
    which: str,
    source: str,
    request: pytest.FixtureRequest,
    real: torch.nn.Module,
    buffers: dict[str, torch.Tensor],
    tmp_path: pathlib.Path,
) -> None:
    program = request.getfixturevalue(f"{which}_program")
    state: Any = {
        "state_dict": real.state_dict(),
        "safetensors": request.getfixturevalue("checkpoint"),
        "shards": request.getfixturevalue("shards"),
    }[source]
    path = program.save(tmp_path / "model.onnx", model_state=[state, buffers])
    _check_in_ort(path, real, _ids())
    assert isinstance(weight_values(program.model)["inner.lm_head.weight"].const_value,
                      WeightPlaceholder)  # fmt: skip  # the program itself stays fake


def test_fake_export_keeps_dynamic_dims(
    real: torch.nn.Module,
    buffers: dict[str, torch.Tensor],
    checkpoint: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    with onnx_export.enable_fake_mode():
        model = _llama()
        ids = _ids()
    program = _export(model, ids, dynamic_shapes={"input_ids": {0: "batch", 1: "sequence"}})
    path = program.save(tmp_path / "model.onnx", model_state=[checkpoint, buffers])
    assert_onnx_program_close(onnx_export.load(path), real, _ids(3, 5))  # type: ignore[arg-type]


def test_external_data_from_a_checkpoint(
    fake_program: onnx_export.ONNXProgram,
    real: torch.nn.Module,
    buffers: dict[str, torch.Tensor],
    checkpoint: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    path = fake_program.save(
        tmp_path / "model.onnx", model_state=[checkpoint, buffers], external_data=True
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert _serialize.check_external_references(path) == ["model.onnx.data"]
    _check_in_ort(path, real, _ids())


def test_export_and_save_inside_the_fake_mode(tmp_path: pathlib.Path) -> None:
    real = torch.nn.Linear(4, 3)
    state = real.state_dict()  # outside the block: inside it, state_dict() returns fakes
    with onnx_export.enable_fake_mode():
        program = onnx_export.dynamo_export(torch.nn.Linear(4, 3), torch.randn(2, 4))
        path = program.save(tmp_path / "model.onnx", model_state=state)
    assert_onnx_program_close(onnx_export.load(path), real, torch.randn(2, 4))  # type: ignore[arg-type]


# -- errors about weights ----------------------------------------------------------------------


def test_saving_a_fake_export_without_weights_names_them(
    fake_program: onnx_export.ONNXProgram, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(onnx_export.SerializationError) as caught:
        fake_program.save(tmp_path / "model.onnx")
    message = str(caught.value)
    assert "fake or meta" in message and "model_state=" in message
    assert "'inner.model.embed_tokens.weight'" in message
    assert "'inner.model.rotary_emb.inv_freq'" in message and "non-persistent" in message
    assert list(tmp_path.iterdir()) == []


def _drop(state: dict[str, Any]) -> None:
    del state["inner.model.norm.weight"]


def _add(state: dict[str, Any]) -> None:
    state["inner.model.unknown.weight"] = torch.zeros(3)


def _reshape(state: dict[str, Any]) -> None:
    state["inner.lm_head.weight"] = state["inner.lm_head.weight"].t().contiguous()


def _retype(state: dict[str, Any]) -> None:
    state["inner.model.norm.weight"] = state["inner.model.norm.weight"].half()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_drop, r"lacks 1 weight.*'inner\.model\.norm\.weight'"),
        (_add, r"does not: 'inner\.model\.unknown\.weight'"),
        (_reshape, r"'inner\.lm_head\.weight': expected FLOAT\[100, 32\], got FLOAT\[32, 100\]"),
        (_retype, r"'inner\.model\.norm\.weight': expected FLOAT\[32\], got FLOAT16\[32\]"),
    ],
    ids=["missing", "extra", "shape", "dtype"],
)
def test_model_state_that_does_not_fit_is_refused(
    change: Callable[[dict[str, Any]], None],
    expected: str,
    fake_program: onnx_export.ONNXProgram,
    real: torch.nn.Module,
    buffers: dict[str, torch.Tensor],
    tmp_path: pathlib.Path,
) -> None:
    state = {**real.state_dict(), **buffers}
    change(state)
    with pytest.raises(onnx_export.SerializationError, match=expected):
        fake_program.save(tmp_path / "model.onnx", model_state=state)
    assert list(tmp_path.iterdir()) == []


def test_a_truncated_checkpoint_is_refused(
    fake_program: onnx_export.ONNXProgram, checkpoint: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(checkpoint.read_bytes()[:-100])
    with pytest.raises(onnx_export.SerializationError, match="truncated or corrupt"):
        fake_program.save(tmp_path / "model.onnx", model_state=broken)


def test_model_state_replaces_the_weights_of_a_real_export(
    real_program: onnx_export.ONNXProgram, tmp_path: pathlib.Path
) -> None:
    other = _llama(seed=1)
    path = real_program.save(tmp_path / "model.onnx", model_state=other.state_dict())
    _check_in_ort(path, other, _ids())


# -- real weights: names kept, streamed, never copied ------------------------------------------


def test_the_optimizer_keeps_every_weight_by_name(
    real_program: onnx_export.ONNXProgram, real: torch.nn.Module
) -> None:
    initializers = weight_values(real_program.model)
    for name, tensor in real.state_dict().items():
        data = initializers[name].const_value
        assert isinstance(data, TorchTensor), name
        assert data.raw.data_ptr() == tensor.data_ptr(), f"{name} was copied"


@pytest.mark.parametrize("external_data", [False, True])
def test_saving_streams_without_copying_weights(
    external_data: bool,
    real_program: onnx_export.ONNXProgram,
    real: torch.nn.Module,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tobytes = TorchTensor.tobytes

    def no_copies(self: TorchTensor) -> bytes:
        # Tensors of 256 bytes or less stay inside the .onnx file even with external data.
        assert self.nbytes <= 256, f"{self.name} ({self.nbytes} bytes) was copied to bytes"
        return tobytes(self)

    monkeypatch.setattr(TorchTensor, "tobytes", no_copies)
    path = real_program.save(tmp_path / "model.onnx", external_data=external_data)
    monkeypatch.undo()
    _check_in_ort(path, real, _ids())


def test_a_single_file_is_what_protobuf_would_write(
    real_program: onnx_export.ONNXProgram, tmp_path: pathlib.Path
) -> None:
    path = real_program.save(tmp_path / "model.onnx")
    assert path.read_bytes() == real_program.model_proto.SerializeToString()


def test_forced_external_data_round_trips(
    real_program: onnx_export.ONNXProgram, real: torch.nn.Module, tmp_path: pathlib.Path
) -> None:
    path = real_program.save(tmp_path / "model.onnx", external_data="weights/model.bin")
    large = [t.nbytes for t in real.state_dict().values() if t.nbytes > 256]
    assert (tmp_path / "weights" / "model.bin").stat().st_size >= sum(large)
    assert _serialize.check_external_references(path) == ["weights/model.bin"]
    _check_in_ort(path, real, _ids())


# -- external data locations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "location",
    ["../evil.data", "weights/../../evil.data", "/tmp/evil.data", "", "..\\evil.data"],
    ids=["parent", "nested-parent", "absolute", "empty", "windows-parent"],
)
def test_an_escaping_external_data_name_is_refused(
    location: str, real_program: onnx_export.ONNXProgram, tmp_path: pathlib.Path
) -> None:
    folder = tmp_path / "out"
    with pytest.raises(onnx_export.SerializationError, match="External data location"):
        real_program.save(folder / "model.onnx", external_data=location)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["out"]


def test_a_model_referencing_data_outside_its_folder_is_refused(tmp_path: pathlib.Path) -> None:
    tensor = onnx.numpy_helper.from_array(torch.ones(4).numpy(), name="w")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    for key, value in (("location", "../secret"), ("offset", "0"), ("length", "16")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        initializer=[tensor],
    )
    path = tmp_path / "model.onnx"
    onnx.save(onnx.helper.make_model(graph), str(path))
    with pytest.raises(ValueError, match="must not leave the model's folder"):
        _serialize.check_external_references(path)
    # Loading it to run: ONNX Runtime itself refuses the escaping path, by name.
    with pytest.raises(Exception, match="escapes model directory"):
        onnx_export.load(path)


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "link").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="outside the model's folder"):
        _serialize.check_external_location("link/x.data", tmp_path / "inside")
    assert _serialize.check_external_location("a/b.data", tmp_path) == tmp_path / "a" / "b.data"


# -- atomic saves ------------------------------------------------------------------------------


@pytest.mark.parametrize("external_data", [False, True])
def test_an_interrupted_save_leaves_the_earlier_files(
    external_data: bool,
    real_program: onnx_export.ONNXProgram,
    real: torch.nn.Module,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = real_program.save(tmp_path / "model.onnx", external_data=external_data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    written = 0

    def failing_midway(tofile: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        def write(self: Any, file: Any) -> None:
            nonlocal written
            written += 1
            if written == 5:
                raise OSError(28, "No space left on device")
            tofile(self, file)

        return write

    # Weights are written from the model's tensors, or computed (fc.weight.T) lazily.
    for cls in (TorchTensor, ir.LazyTensor):
        monkeypatch.setattr(cls, "tofile", failing_midway(cls.tofile))
    with pytest.raises(onnx_export.SerializationError, match="No space left"):
        real_program.save(path, external_data=external_data)
    monkeypatch.undo()
    assert written == 5
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    _check_in_ort(path, real, _ids())


# -- reproducible bytes ------------------------------------------------------------------------

_EXPORT_SCRIPT = """
import sys, torch
from tests.onnx_export.test_large_models import _export, _ids, _llama
torch.manual_seed(0)
ids = _ids()
_export(_llama(), ids).save(sys.argv[1])
"""


def test_two_exports_write_identical_bytes(tmp_path: pathlib.Path) -> None:
    files = []
    for i in range(2):
        torch.manual_seed(0)
        ids = _ids()
        program = _export(_llama(), ids)
        files.append(program.save(tmp_path / f"in_process_{i}.onnx").read_bytes())
    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(root))
    other = tmp_path / "other_process.onnx"
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXPORT_SCRIPT), str(other)],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    assert files[0] == files[1], "two exports in one process differ"
    assert other.read_bytes() == files[0], "an export in another process differs"


# -- progress ----------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "enabled", "draws"),
    [
        (io.StringIO, None, False),
        (_Terminal, None, True),
        (_Terminal, False, False),
        (io.StringIO, True, True),
    ],
    ids=["pipe", "terminal", "terminal-off", "pipe-forced"],
)
def test_the_progress_bar_draws_only_on_a_terminal_or_when_asked(
    stream: type[io.StringIO], enabled: bool | None, draws: bool
) -> None:
    out = stream()
    with ProgressBar("Saving weights", 3 * 2**20, unit="B", enabled=enabled, stream=out) as bar:
        for _ in range(3):
            bar.advance(2**20)
    text = out.getvalue()
    assert bool(text) == draws
    if draws:
        assert "Saving weights [" in text and "100%" in text and "3.00 MB/3.00 MB" in text
        assert text.endswith("\n")


def test_translation_progress_is_quiet_for_small_graphs() -> None:
    assert not translation_progress(10).enabled
    bar = translation_progress(10, enabled=True)
    assert bar.enabled and bar.unit == "nodes" and bar.total == 10


def test_save_shows_progress_when_asked(
    real_program: onnx_export.ONNXProgram,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real_program.save(tmp_path / "quiet.onnx")
    assert capsys.readouterr().err == ""
    real_program.save(tmp_path / "loud.onnx", progress=True)
    assert "Saving weights [" in capsys.readouterr().err
