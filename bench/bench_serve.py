"""Serving throughput: our Triton server (dynamic batching) against ONNX Runtime called directly.

One model (an MLP block, ``[batch, 256] -> 1024 -> 256`` with GELU, batch dynamic) exported
with ``onnx_export.dynamo_export`` and served by ``onnx_export.serving.TritonServer`` (the
``tritonserver`` that nvidia-pytriton bundles, its Python backend running
``onnx_export.load`` with ONNX Runtime inside, dynamic batching on). At each concurrency
(1, 8, 32 client threads, each sending requests of batch 1 one after another) it measures
requests/s and the p50/p99 latency of

- ``triton``: ``TritonModel`` over HTTP (nested in, nested out), and
- ``direct``: the same threads calling one ``onnx_export.load`` module (one shared ONNX
  Runtime session) in-process, the competitor a single process offers.

Triton's numbers include the HTTP round trip, the Python backend's shared-memory hand-over
and the batcher's queue delay; a real Triton with its ONNX Runtime backend would skip the
Python stub. Absolute numbers on a shared 2-core machine are noise; compare columns of one
run. Prints a Markdown table.

Run: ``python bench/bench_serve.py [--seconds 3] [--concurrency 1 8 32]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx_export
from onnx_export.serving import ServingOptions, TritonModel, TritonServer, write_triton_repository

HIDDEN = 256


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": self.down(torch.nn.functional.gelu(self.up(x))) + x}


def _export(folder: Path) -> Path:
    torch.manual_seed(0)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(
        Block().eval(), torch.randn(2, HIDDEN), export_options=options
    )
    program.save(folder / "block.onnx")
    return folder / "block.onnx"


def _load(
    call: Callable[[np.ndarray], object], threads: int, seconds: float
) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 latency (ms) of ``threads`` threads calling ``call``."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def client(index: int) -> None:
        x = np.random.default_rng(index).standard_normal((1, HIDDEN), dtype=np.float32)
        call(x)  # warm: this thread's connection
        start.wait()
        while time.perf_counter() < stop_at[0]:
            began = time.perf_counter()
            call(x)
            latencies[index].append(time.perf_counter() - began)

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    stop_at[0] = time.perf_counter() + seconds + 0.05
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    flat = np.array([t for per_thread in latencies for t in per_thread]) * 1000
    return len(flat) / elapsed, float(np.percentile(flat, 50)), float(np.percentile(flat, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-queue-delay-us", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        model_path = _export(folder)
        options = ServingOptions(max_batch_size=64, max_queue_delay_us=args.max_queue_delay_us)
        write_triton_repository(model_path, folder / "repo", options=options, backend="python")
        direct = onnx_export.load(model_path)
        torch.manual_seed(0)
        eager = Block().eval()
        with (
            TritonServer(folder / "repo") as server,
            TritonModel(server.http_url, "block") as served,
        ):
            x = np.ones((3, HIDDEN), np.float32)
            np.testing.assert_allclose(served(x)["y"], direct(x)["y"], rtol=1e-5, atol=1e-5)
            with torch.no_grad():
                expected = eager(torch.from_numpy(x))["y"].numpy()
            np.testing.assert_allclose(served(x)["y"], expected, rtol=1e-4, atol=1e-4)
            print(
                "| concurrency | triton req/s | direct req/s | triton/direct "
                "| triton p50 / p99 ms | direct p50 / p99 ms |"
            )
            print("|---|---|---|---|---|---|")
            for threads in args.concurrency:
                ours = _load(served, threads, args.seconds)
                theirs = _load(direct, threads, args.seconds)
                print(
                    f"| {threads} | {ours[0]:.0f} | {theirs[0]:.0f} | {ours[0] / theirs[0]:.2f}x "
                    f"| {ours[1]:.2f} / {ours[2]:.2f} | {theirs[1]:.2f} / {theirs[2]:.2f} |",
                    flush=True,
                )
            stats = _batches(server)
            print(
                f"\nTriton executed {stats[0]} requests in {stats[1]} model runs "
                f"({stats[0] / max(stats[1], 1):.1f} requests per run: the dynamic batcher)."
            )


def _batches(server: TritonServer) -> tuple[int, int]:
    import tritonclient.http as http

    client = http.InferenceServerClient(server.http_url)
    try:
        (stats,) = client.get_inference_statistics("block")["model_stats"]
    finally:
        client.close()
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"])


if __name__ == "__main__":
    main()
