"""``onnx-export triton``: a Triton model repository from the graph and the adapter spec.

Every ``config.pbtxt`` is parsed by Triton's own ``ModelConfig`` (``tritonclient``) and
checked against its graph; no server is needed here (tests/serving/test_triton_server.py
starts one).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

from onnx_export.adapters import METADATA_KEY
from onnx_export.cli import main
from onnx_export.serving import (
    RepositoryError,
    ServingOptions,
    write_triton_repository,
)
from tests.serving.config_checks import check_against_graph, instance_groups, parse_config

BATCHED = {"cached": True, "static": False, "vision": True, "bert": True}


@pytest.mark.parametrize("name", ["cached", "static", "vision", "bert"])
def test_config_parses_and_matches_the_graph(saved, tmp_path: pathlib.Path, name: str) -> None:
    model = saved(name)
    repo = write_triton_repository(model.path, tmp_path / "repo")
    assert repo.models == (model.path.stem if model.path.is_file() else model.path.name,)
    (served,) = repo.models
    config = parse_config(repo.config_path(served))
    onnx_file = repo.path / served / "1" / "model.onnx"
    assert check_against_graph(config, onnx_file) is BATCHED[name]
    assert config.name == served
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    assert config.max_batch_size == (16 if BATCHED[name] else 0)
    assert instance_groups(config) == [("KIND_CPU", 1)]
    spec = config.parameters["onnx_export.adapter_spec"].string_value
    stored = onnx.load(onnx_file, load_external_data=False).metadata_props
    assert spec == next(p.value for p in stored if p.key == METADATA_KEY)
    (warmup,) = config.model_warmup
    assert warmup.batch_size == 1 and set(warmup.inputs) == {i.name for i in config.input}
    assert all(w.zero_data for w in warmup.inputs.values())


def test_options_become_instance_group_batching_and_no_warmup(saved, tmp_path) -> None:
    options = ServingOptions(
        device="cuda", instances=3, max_batch_size=64, max_queue_delay_us=250, warmup=False
    )
    repo = write_triton_repository(saved("vision").path, tmp_path, name="cnn", options=options)
    config = parse_config(repo.config_path("cnn"))
    assert instance_groups(config) == [("KIND_GPU", 3)]
    assert config.max_batch_size == 64
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert not config.model_warmup


def test_python_backend_repository_holds_the_model_py(saved, tmp_path) -> None:
    repo = write_triton_repository(saved("cached").path, tmp_path, backend="python")
    config = parse_config(repo.config_path("cached"))
    assert config.backend == "python" and not config.platform
    assert check_against_graph(config, tmp_path / "cached" / "1" / "model.onnx")
    model_py = (tmp_path / "cached" / "1" / "model.py").read_text()
    assert "class TritonPythonModel" in model_py


def test_written_model_runs_in_onnx_runtime_like_the_saved_one(saved, tmp_path) -> None:
    model = saved("vision")
    repo = write_triton_repository(model.path, tmp_path)
    images = np.random.default_rng(0).standard_normal((2, 3, 16, 16), dtype=np.float32)
    copied = ort.InferenceSession(repo.path / "vision" / "1" / "model.onnx")
    original = ort.InferenceSession(model.path)
    expected = model.model(__import__("torch").from_numpy(images)).detach().numpy()
    for session in (copied, original):
        (logits,) = session.run(None, {"pixel_values": images})
        np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_external_data_is_copied_beside_the_model(tmp_path) -> None:
    weight = onnx.numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4096])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4096])],
        [weight],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "big.onnx", save_as_external_data=True, location="big.data")
    repo = write_triton_repository(tmp_path / "big.onnx", tmp_path / "repo")
    version = repo.path / "big" / "1"
    assert sorted(p.name for p in version.iterdir()) == ["big.data", "model.onnx"]
    x = np.ones((2, 4096), np.float32)
    (y,) = ort.InferenceSession(version / "model.onnx").run(None, {"x": x})
    np.testing.assert_array_equal(y, x + np.arange(4096, dtype=np.float32))
    assert parse_config(repo.config_path("big")).max_batch_size == 16


def test_kserve_manifest_is_an_inference_service_for_onnx_on_triton(saved, tmp_path) -> None:
    repo = write_triton_repository(
        saved("bert").path, tmp_path, name="Tiny_BERT", kserve="s3://bucket/models"
    )
    assert repo.kserve_manifest == tmp_path / "Tiny_BERT.inferenceservice.yaml"
    manifest = yaml.safe_load(repo.kserve_manifest.read_text())
    assert manifest["apiVersion"] == "serving.kserve.io/v1beta1"
    assert manifest["kind"] == "InferenceService"
    assert manifest["metadata"]["name"] == "tiny-bert"  # a DNS-1123 label
    model = manifest["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "onnx"}
    assert model["storageUri"] == "s3://bucket/models"
    assert model["protocolVersion"] == "v2"
    assert model["runtime"] == "kserve-tritonserver"


def _decoder_step(path: pathlib.Path) -> pathlib.Path:
    shape = ["batch", 2, "past_sequence_length", 8]
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["past_key_values.0.key"], ["present.0.key"])],
        "step",
        [onnx.helper.make_tensor_value_info("past_key_values.0.key", 1, shape)],
        [onnx.helper.make_tensor_value_info("present.0.key", 1, shape)],
    )
    onnx.save(onnx.helper.make_model(graph), path)
    return path


def test_a_decoder_with_a_cache_is_refused_with_what_to_use(tmp_path) -> None:
    with pytest.raises(RepositoryError, match="key/value cache") as caught:
        write_triton_repository(_decoder_step(tmp_path / "step.onnx"), tmp_path / "repo")
    assert "OrtModelForCausalLM" in str(caught.value)
    assert "`onnx-export serve FOLDER --openai`" in str(caught.value)
    assert not (tmp_path / "repo" / "step").exists()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: p / "missing.onnx", "does not exist"),
        (lambda p: (p / "junk.onnx").write_bytes(b"\x00junk") and p / "junk.onnx", "not"),
        (lambda p: p, "folder written by `onnx-export hf`"),
    ],
    ids=["missing", "not-onnx", "plain-folder"],
)
def test_unusable_sources_are_refused(tmp_path, make, match) -> None:
    source = tmp_path / "in"
    source.mkdir()
    with pytest.raises(RepositoryError, match=match):
        write_triton_repository(make(source), tmp_path / "repo")


def test_a_folder_it_did_not_write_is_not_replaced(saved, tmp_path) -> None:
    (tmp_path / "cached").mkdir()
    (tmp_path / "cached" / "mine.txt").write_text("keep")
    with pytest.raises(RepositoryError, match="not written by onnx-export"):
        write_triton_repository(saved("cached").path, tmp_path)
    assert (tmp_path / "cached" / "mine.txt").read_text() == "keep"


def test_its_own_model_folder_is_replaced_and_others_kept(saved, tmp_path) -> None:
    write_triton_repository(saved("cached").path, tmp_path)
    write_triton_repository(saved("vision").path, tmp_path)
    options = ServingOptions(instances=2)
    write_triton_repository(saved("cached").path, tmp_path, options=options)
    assert parse_config(tmp_path / "cached" / "config.pbtxt").instance_group[0].count == 2
    assert parse_config(tmp_path / "vision" / "config.pbtxt").name == "vision"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cached", "vision"]


def test_cli_writes_the_repository_and_manifest(saved, tmp_path, capsys) -> None:
    code = main(
        [
            "triton",
            str(saved("cached").path),
            "-o",
            str(tmp_path / "repo"),
            "--instances",
            "2",
            "--kserve",
            "pvc://models/repo",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "repo/cached/config.pbtxt" in out and "cached.inferenceservice.yaml" in out
    config = parse_config(tmp_path / "repo" / "cached" / "config.pbtxt")
    assert config.instance_group[0].count == 2
    mark = json.loads((tmp_path / "repo" / "cached" / "onnx_export.json").read_text())
    assert mark["backend"] == "onnxruntime"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--instances", "0"], "--instances must be at least 1"),
        (["--max-batch-size", "0"], "--max-batch-size must be at least 1"),
    ],
)
def test_cli_refuses_bad_numbers_with_exit_2(saved, tmp_path, capsys, extra, message) -> None:
    code = main(["triton", str(saved("cached").path), "-o", str(tmp_path), *extra])
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_decoder_with_exit_2(tmp_path, capsys) -> None:
    code = main(["triton", str(_decoder_step(tmp_path / "step.onnx")), "-o", str(tmp_path / "r")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-export triton: error: ") and "key/value cache" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["missing.onnx"], "does not exist"),
        (["MODEL", "--port", "0"], "--port must be a TCP port, got 0"),
        (["MODEL", "--port", "65535"], "--grpc-port must be a TCP port, got 65536"),
    ],
    ids=["missing-model", "port-0", "no-grpc-port-above"],
)
def test_serve_refuses_bad_input_with_exit_2_before_starting(
    saved, tmp_path, monkeypatch, capsys, arguments, message
) -> None:
    monkeypatch.chdir(tmp_path)
    model = str(saved("cached").path)
    code = main(["serve", *(model if a == "MODEL" else a for a in arguments)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-export serve: error: ") and message in err
