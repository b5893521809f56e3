"""Overhead of the adapters: ``OnnxModule.__call__`` against a raw ``InferenceSession.run``.

Two models built with ``onnx.helper``: a tiny one (one Add of two tensors) and a nested-input
one (a dict of 4 tensors and a list of 2, summed). Both callers share one session; calls are
interleaved in short blocks so that drift affects both alike. Prints the medians (the best of
``--repeat`` runs, against noise from other processes), the difference in microseconds and the
ratio, and exits with status 1 when the overhead of any model exceeds
max(10 us, 5% of the raw call).

Run: ``python bench/bench_adapter_overhead.py [--calls 2000]``
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnx_export.adapters import OnnxModule, build_adapter_spec, flat_input_names

ABSOLUTE_LIMIT_US = 10.0
RELATIVE_LIMIT = 0.05


@dataclass(frozen=True)
class Case:
    name: str
    module: OnnxModule
    call: Callable[[], object]
    raw: Callable[[], object]


def _model(inputs: list[str], op: str, shape: list[int]) -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["output"])],
        "bench",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in inputs],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


def _case(name: str, forward: Callable[..., Any], args: tuple[object, ...], op: str) -> Case:
    shape = [2, 3]
    outputs = np.zeros(shape, np.float32)
    spec = build_adapter_spec(inspect.signature(forward), args, {}, outputs)
    names = flat_input_names(spec)
    module = OnnxModule(_model(names, op, shape), spec, session_options=_options())
    session = module.session
    leaves = _leaves(args)
    feed = dict(zip(names, leaves, strict=True))
    output_names = module.output_names
    return Case(name, module, lambda: module(*args), lambda: session.run(output_names, feed))


def _leaves(value: object) -> list[np.ndarray[Any, Any]]:
    if isinstance(value, np.ndarray):
        return [value]
    items = value.values() if isinstance(value, dict) else value
    return [leaf for item in items for leaf in _leaves(item)]  # type: ignore[union-attr]


def tiny_case() -> Case:
    def forward(x: Any, y: Any) -> Any: ...

    x = np.ones((2, 3), np.float32)
    return _case("tiny (x + y)", forward, (x, x + 1), "Add")


def nested_case() -> Case:
    def forward(inputs: Any, extra: Any) -> Any: ...

    rng = np.random.default_rng(0)
    tensors = {k: rng.standard_normal((2, 3)).astype(np.float32) for k in "abcd"}
    extra = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)]
    return _case("nested (dict of 4 + list of 2)", forward, (tensors, extra), "Sum")


CLOCKS: dict[str, Callable[[], int]] = {
    "cpu": time.thread_time_ns,
    "wall": time.perf_counter_ns,
}
"""``cpu`` (default): CPU time of this thread. The sessions run on one intra-op thread, so all
of ONNX Runtime's work runs on the calling thread and is counted, while time spent waiting for
a core on a shared machine is not. ``wall``: elapsed time."""


def measure(
    case: Case, calls: int, block: int = 10, clock: Callable[[], int] = time.thread_time_ns
) -> tuple[float, float]:
    """Median microseconds per call of (adapted, raw).

    Calls run in blocks of ``block``, alternating adapted and raw blocks, so that drift and
    noise hit both alike while each block runs warm, as a serving loop does; the median is
    over the per-call means of the blocks.
    """
    for _ in range(200):
        case.call()
        case.raw()
    adapted, raw = [], []
    call, run = case.call, case.raw
    for _ in range(max(1, calls // block)):
        t0 = clock()
        for _ in range(block):
            call()
        t1 = clock()
        for _ in range(block):
            run()
        t2 = clock()
        adapted.append((t1 - t0) / block)
        raw.append((t2 - t1) / block)
    return statistics.median(adapted) / 1e3, statistics.median(raw) / 1e3


def _median_call_us(fn: Any, calls: int) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def compare_torch_onnx(calls: int = 2000) -> dict[str, float] | None:
    """Per-call time of both exporters' ``ONNXProgram.__call__`` on the same tiny model.

    Both take torch tensors and return torch tensors; the raw ORT figure is a session on
    our exported model, fed numpy arrays. Wall-clock medians, in one process.
    """
    import warnings

    import torch

    import onnx_export

    class AddModel(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    ours = onnx_export.dynamo_export(AddModel(), x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(AddModel(), (x, y), dynamo=True, verbose=False)
    session = ort.InferenceSession(
        ours.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feed = {"x": x.numpy(), "y": y.numpy()}
    return {
        "tiny model, raw ORT session.run": _median_call_us(lambda: session.run(None, feed), calls),
        "onnx_export ONNXProgram(x, y)": _median_call_us(lambda: ours(x, y), calls),
        "torch.onnx ONNXProgram(x, y)": _median_call_us(lambda: theirs(x, y), calls),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs per case; the smallest medians are kept"
    )
    options = parser.parse_args(argv)
    calls, clock = options.calls, CLOCKS[options.clock]
    failed = False
    print(
        f"onnxruntime {ort.__version__}, {calls} calls each in interleaved blocks, "
        f"{options.clock} time, best median of {options.repeat} runs"
    )
    for case in (tiny_case(), nested_case()):
        runs = [measure(case, calls, clock=clock) for _ in range(options.repeat)]
        adapted, raw = min(r[0] for r in runs), min(r[1] for r in runs)
        overhead = adapted - raw
        limit = max(ABSOLUTE_LIMIT_US, RELATIVE_LIMIT * raw)
        verdict = "ok" if overhead <= limit else "TOO SLOW"
        failed |= overhead > limit
        print(
            f"{case.name:32s} OnnxModule {adapted:8.2f} us | raw run {raw:8.2f} us | "
            f"overhead {overhead:+7.2f} us | ratio {adapted / raw:5.3f} | limit {limit:.1f} us "
            f"{verdict}"
        )
    competitor = compare_torch_onnx(calls)
    if competitor:
        for label, median_us in competitor.items():
            print(f"{label:32s} {median_us:8.2f} us")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
