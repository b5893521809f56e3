"""A real Triton server (PyTriton's bundled ``tritonserver``) on loopback, not a mock.

One server per module serves the nested model, the vision model and the BERT folder through
Triton's Python backend (``onnx_export.load`` with ONNX Runtime inside, dynamic batching
on); :class:`TritonModel` calls them with nested inputs over HTTP and gRPC, from several
threads at once, and the answers equal eager PyTorch's. The last tests stop servers and
check that no process is left.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
import torch

from onnx_export.adapters import ConstantMismatchError, InputDtypeError, InputShapeError
from onnx_export.serving import (
    ServerError,
    ServingError,
    ServingOptions,
    TritonModel,
    TritonServer,
    free_port,
    write_triton_repository,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
THREADS = 8


@pytest.fixture(scope="module")
def server(saved, tritonserver_home, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    # A long queue delay, so that the threads' requests are batched together.
    options = ServingOptions(max_batch_size=32, max_queue_delay_us=20_000)
    for name in ("cached", "vision", "bert"):
        write_triton_repository(saved(name).path, repo, options=options, backend="python")
    _write_interpreter_probe(repo / "probe")
    triton = TritonServer(repo, tritonserver=tritonserver_home)
    triton.start(timeout=120)
    yield triton
    triton.stop()


_PROBE = """
import sys, threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        facts = [*sys.version_info[:3], hasattr(threading.RLock(), "_recursion_count")]
        value = np.array(facts, dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("facts", value)])
                for _ in requests]
"""


def _write_interpreter_probe(folder: pathlib.Path) -> None:
    """A Python-backend model that reports the stub's Python: version, RLock's internals."""
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(_PROBE)
    (folder / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "any" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "facts" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
    )


def test_the_backend_stub_runs_this_interpreter(server) -> None:
    import threading as here

    import tritonclient.http as http

    client = http.InferenceServerClient(server.http_url)
    try:
        given = http.InferInput("any", [1], "INT32")
        given.set_data_from_numpy(np.zeros(1, np.int32))
        facts = client.infer("probe", [given]).as_numpy("facts").tolist()
    finally:
        client.close()
    # The stub's libpython is this interpreter's, so its standard library agrees with it
    # (a pyenv venv on Debian's libpython fails in multiprocessing.resource_tracker).
    assert facts == [*sys.version_info[:3], hasattr(here.RLock(), "_recursion_count")]


def test_the_backend_runs_the_onnx_export_that_started_the_server(server) -> None:
    import onnx_export

    log = server.log_path.read_text()
    package = pathlib.Path(onnx_export.__file__).parent
    version = sys.version.split()[0]
    for name in ("cached", "vision", "bert"):
        assert f"{name}: onnx_export.load from {package} in Python {version}" in log


def _eager_cached(model, x, cache, scale, mask=None):
    with torch.no_grad():
        out = model(
            torch.from_numpy(x),
            [torch.from_numpy(c) for c in cache],
            scale=scale,
            mask=None if mask is None else torch.from_numpy(mask),
        )
    return out


def _assert_nested_close(got, expected) -> None:
    assert set(got) == {"y", "past"} and isinstance(got["past"], tuple)
    np.testing.assert_allclose(np.asarray(got["y"]), expected["y"].numpy(), rtol=1e-5, atol=1e-6)
    assert len(got["past"]) == len(expected["past"])
    for g, e in zip(got["past"], expected["past"], strict=True):
        np.testing.assert_allclose(np.asarray(g), e.numpy(), rtol=1e-5, atol=1e-6)


def _inputs(batch: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 4), dtype=np.float32)
    return x, [rng.standard_normal((batch, 4), dtype=np.float32) for _ in range(2)]


def test_nested_inputs_over_http_give_eagers_outputs(server, saved) -> None:
    x, cache = _inputs(3, 0)
    with TritonModel(server.http_url, "cached") as model:
        got = model(x, cache, scale=3.0)
    _assert_nested_close(got, _eager_cached(saved("cached").model, x, cache, 3.0))


def test_torch_tensors_over_grpc_give_torch_tensors(server, saved) -> None:
    x, cache = _inputs(5, 1)
    with TritonModel(server.grpc_url, "cached") as model:
        got = model(torch.from_numpy(x), [torch.from_numpy(c) for c in cache], scale=3.0, mask=None)
    assert isinstance(got["y"], torch.Tensor)
    _assert_nested_close(got, _eager_cached(saved("cached").model, x, cache, 3.0))


def test_inputs_are_checked_before_sending_with_loads_errors(server) -> None:
    x, cache = _inputs(2, 2)
    with TritonModel(server.http_url, "cached") as model:
        with pytest.raises(ConstantMismatchError, match="scale"):
            model(x, cache, scale=2.0)
        with pytest.raises(InputDtypeError, match="x"):
            model(x.astype(np.float64), cache, scale=3.0)
        with pytest.raises(InputShapeError, match=r"cache\[1\]"):
            model(x, [cache[0], cache[1][:, :3]], scale=3.0)


def test_eight_threads_at_once_get_their_own_answers_in_batches(server, saved) -> None:
    eager = saved("cached").model
    model = TritonModel(server.http_url, "cached")
    start = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def client(index: int) -> None:
        try:
            start.wait(timeout=30)
            for round_ in range(4):
                x, cache = _inputs(1 + index % 3, 100 * index + round_)
                _assert_nested_close(
                    model(x, cache, scale=3.0), _eager_cached(eager, x, cache, 3.0)
                )
        except BaseException as e:  # reported below, by the test's own thread
            failures.append(e)

    before = _statistics(server, "cached")
    threads = [threading.Thread(target=client, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    model.close()
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    requests, executions = (
        a - b for a, b in zip(_statistics(server, "cached"), before, strict=True)
    )
    assert requests == THREADS * 4
    assert executions < requests  # the dynamic batcher joined requests


def _statistics(server, name: str) -> tuple[int, int]:
    import tritonclient.http as http

    client = http.InferenceServerClient(server.http_url)
    try:
        (stats,) = client.get_inference_statistics(name)["model_stats"]
    finally:
        client.close()
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"])


def test_vision_model_gives_eagers_logits(server, saved) -> None:
    images = np.random.default_rng(3).standard_normal((4, 3, 16, 16), dtype=np.float32)
    with TritonModel(server.http_url, "vision") as model:
        logits = model(images)
    with torch.no_grad():
        expected = saved("vision").model(torch.from_numpy(images)).numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_bert_folder_gives_eagers_hidden_states(server, saved) -> None:
    ids = np.array([[2, 5, 7, 9, 3], [4, 4, 6, 1, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], dtype=np.int64)
    types = np.zeros_like(ids)
    with TritonModel(server.grpc_url, "bert") as model:
        got = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        expected = saved("bert").model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            token_type_ids=torch.from_numpy(types),
        )
    np.testing.assert_allclose(
        got["last_hidden_state"], expected.last_hidden_state.numpy(), rtol=1e-4, atol=1e-4
    )


def test_a_spec_given_as_the_saved_file_is_used_and_checked(server, saved) -> None:
    images = np.zeros((1, 3, 16, 16), np.float32)
    with TritonModel(server.http_url, "vision", spec=saved("vision").path) as model:
        assert model(images).shape == (1, 5)
    with pytest.raises(ServingError, match="adapter spec expects inputs"):
        TritonModel(server.http_url, "vision", spec=saved("cached").path)


def test_an_unknown_model_is_a_server_error(server) -> None:
    with pytest.raises(ServerError, match="no-such-model"):
        TritonModel(server.http_url, "no-such-model")


def test_a_port_in_use_is_a_server_error_quoting_the_log(tritonserver_home, tmp_path) -> None:
    import socket

    _write_interpreter_probe(tmp_path / "repo" / "probe")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        triton = TritonServer(tmp_path / "repo", http_port=busy, tritonserver=tritonserver_home)
        with pytest.raises(ServerError, match="exited with code") as caught:
            triton.start(timeout=60)
    assert f"Socket '127.0.0.1:{busy}' already in use" in str(caught.value)
    assert triton.pid is None


def _family(pid: int) -> list[psutil.Process]:
    parent = psutil.Process(pid)
    return [parent, *parent.children(recursive=True)]


def _gone(processes: list[psutil.Process]) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(processes, timeout=10)
    return alive


def test_stop_ends_the_server_and_its_backend_stubs(server) -> None:
    family = _family(server.pid)
    assert len(family) >= 2  # tritonserver and at least one Python backend stub
    started = time.monotonic()
    server.stop()
    assert server.pid is None
    assert _gone(family) == []
    assert time.monotonic() - started < 35  # stop() waits 20 s, then kills


def test_a_process_that_exits_without_stop_stops_its_server(tritonserver_home, tmp_path) -> None:
    _write_interpreter_probe(tmp_path / "repo" / "probe")
    script = (
        "from onnx_export.serving import TritonServer\n"
        f"server = TritonServer({str(tmp_path / 'repo')!r}).start(timeout=60)\n"
        "print(server.pid, flush=True)\n"
    )
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not psutil.pid_exists(int(done.stdout.split()[0]))


def _end(process: subprocess.Popen, family: list[psutil.Process]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # serve stops its server, as on Ctrl-C
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for member in _gone(family):  # the server, had serve died without stopping it
        member.kill()


def test_serve_command_serves_until_ctrl_c_and_leaves_no_process(saved, tritonserver_home) -> None:
    port, grpc_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "onnx_export.cli",
        "serve",
        str(saved("cached").path),
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
    ]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    family: list[psutil.Process] = []
    try:
        # "serving ... (Ctrl-C stops)" once ready; "" if it gave up (its --timeout bounds it)
        line = process.stdout.readline()
        assert line.startswith("serving cached at http://127.0.0.1:"), (
            line,
            process.stderr.read() if process.poll() is not None else "",
        )
        family = _family(process.pid)
        x, cache = _inputs(2, 7)
        with TritonModel(f"127.0.0.1:{port}", "cached") as model:
            _assert_nested_close(
                model(x, cache, scale=3.0), _eager_cached(saved("cached").model, x, cache, 3.0)
            )
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:  # on a failure too: no server outlives the test
        _end(process, family)
    assert process.returncode == 0, err
    assert out.strip().endswith("stopped")
    assert _gone(family) == []
