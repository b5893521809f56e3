"""transformers' own tiny test models, every architecture its test suite lists, both exporters.

For every ``tests/models/*/test_modeling_*.py`` of a transformers checkout (kept in the
git-ignored ``outside/transformers/tests``; ``--tests`` names another folder), each test
class with ``all_model_classes`` builds its ``ModelTester``'s config and inputs
(``prepare_config_and_inputs_for_common``), and each model class of ``all_model_classes``
is built from that config (``torch.manual_seed(0)``), run eagerly (eval, no grad), then
exported with ours (``onnx_export.dynamo_export``, run through the program in ONNX
Runtime) and with ``torch.onnx.export(..., dynamo=True)`` (run through its program), and
compared with eager. Each (architecture, exporter) runs in its own child process with a
timeout, so that one hang or crash does not end the sweep; results go to a JSON-lines
cache (``--cache``) as they come, so a sweep can run in chunks and resume.

Statuses: ``ok`` (every tensor output within ``atol + rtol * max|eager|`` of eager),
``ok_ties`` (it matches eager once ``torch.topk`` breaks exact ties by the lowest index,
as ONNX's ``TopK`` does: a zero-initialised router or a padding token's zero embedding
makes every expert score equal, and torch's CPU ``topk`` then picks an order of its own),
``mismatch`` (runs, numbers differ: silently wrong unless the exporter warned),
``fail`` (with a reason class: capture data-dependent, capture other, unsupported op,
invalid file, runtime, save, outputs differ in count or shape, timeout, other) and
``eager_fail`` (the harness's problem: the tester's module, config or eager call).

    python bench/bench_transformers_testers.py --exporters ours [--only bert,gpt2] [--jobs 1]
    python bench/bench_transformers_testers.py --report   # the table from the cache
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import unittest
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ROOT / "outside" / "transformers"
CACHE = ROOT / "outside" / "transformers_testers.jsonl"
RESULTS = ROOT / "bench" / "transformers_testers_results.json"
EXPORTERS = ("ours", "torch.onnx")
RTOL, ATOL = 1e-3, 1e-4
PAIR_SECONDS = 240

#: Reason classes, first match wins; checked against "ExceptionType: message".
_REASONS = (
    ("timeout", ("PairTimeout",)),
    (
        "capture: data-dependent",
        (
            "data-dependent",
            "Data-dependent",
            "GuardOnDataDependentSymNode",
            "data dependent",
            "Could not guard on data-dependent",
            "Could not extract specialized integer from data-dependent",
            "tensor's value",
        ),
    ),
    ("cache output", ("is not a known type", "DynamicCache", "EncoderDecoderCache")),
    ("save", ("SerdeError", "serializ", "Serializ")),
    ("invalid file", ("InvalidModelError", "InvalidGraph", "INVALID_GRAPH", "ValidationError")),
    (
        "unsupported op",
        ("unsupported", "Unsupported", "No decompositions registered", "DispatchError"),
    ),
    ("runtime", ("onnxruntime", "RuntimeException", "ONNXRuntimeError", "RUNTIME_EXCEPTION")),
    ("outputs differ", ("OutputsDiffer",)),
    (
        "capture: other",
        ("CaptureError", "torch._dynamo", "Unsupported:", "UserError", "TorchRuntimeError"),
    ),
)


class PairTimeout(Exception):
    """One (architecture, head) took longer than ``PAIR_SECONDS``."""


class OutputsDiffer(Exception):
    """The exported program returns other outputs (count, shape, dtype) than eager."""


def reason_class(error: str) -> str:
    """The failure's class from ``"Type: message"``."""
    for name, markers in _REASONS:
        if any(m in error for m in markers):
            return name
    return "other"


# --------------------------------------------------------------------------- worker side


def _tensor_leaves(value: Any) -> list[Any]:
    import torch
    from torch.utils import _pytree as pytree

    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _clone(value: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


def _compare(actual: list[Any], expected: list[Any]) -> tuple[float, str]:
    """The largest difference beyond tolerance (0.0 within), and where; OutputsDiffer on form."""
    import torch

    if len(actual) != len(expected):
        raise OutputsDiffer(f"{len(actual)} outputs, eager has {len(expected)}")
    worst, where = 0.0, ""
    for i, (result, want) in enumerate(zip(actual, expected, strict=True)):
        got = torch.as_tensor(result)
        if tuple(got.shape) != tuple(want.shape):
            raise OutputsDiffer(f"output {i}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        if want.numel() == 0:
            continue
        if want.dtype == torch.bool or not want.is_floating_point():
            if not bool((got.to(want.dtype) == want).all()):
                worst, where = float("inf"), f"output {i} ({want.dtype}) differs"
            continue
        want64, got64 = want.double(), got.double()
        if bool((got64.isnan() != want64.isnan()).any()):
            side = "ONNX" if bool(got64.isnan().any()) else "eager"
            worst, where = float("inf"), f"output {i}: NaN in {side} only"
            continue
        diff = float((got64 - want64).abs().nan_to_num(0.0, posinf=1e30, neginf=1e30).max())
        scale = ATOL + RTOL * float(want64.abs().nan_to_num(0.0).max())
        if diff > scale and diff > worst:
            worst, where = diff, f"output {i} {tuple(want.shape)}"
    return worst, where


def _export_ours(model: Any, inputs: dict[str, Any]) -> tuple[list[Any], int]:
    import onnx_export

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnx_export.dynamo_export(model, **_clone(inputs))
    warned = sum(1 for w in caught if "differ" in str(w.message) or "eager" in str(w.message))
    return _tensor_leaves(program(**_clone(inputs))), warned


def _export_torch_onnx(model: Any, inputs: dict[str, Any]) -> tuple[list[Any], int]:
    import torch

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        program = torch.onnx.export(model, (), kwargs=_clone(inputs), dynamo=True, verbose=False)
        return [torch.as_tensor(t) for t in program(**_clone(inputs))], 0


_MISSING_NAME = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'")


def _import_tests(name: str) -> Any:
    """Import a test module; names the installed transformers lacks become stand-ins.

    The tests may be of another transformers release than the installed one: a helper
    they import for test methods the sweep never calls (tensor parallel plans, ...) is
    replaced by a stand-in, and the import is tried again.
    """
    import importlib

    for _ in range(30):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:  # a test-only package (datasets, ...)
            if not e.name or e.name.split(".")[0] in ("transformers", "torch", "tests"):
                raise
            _stand_in(e.name)
        except ImportError as e:
            found = _MISSING_NAME.search(str(e))
            if found is None or not found.group("module").startswith("transformers"):
                raise
            module = importlib.import_module(found.group("module"))
            setattr(module, found.group("name"), _Decorators())
            for loaded in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
                del sys.modules[loaded]
    return importlib.import_module(name)


def _testers(path: Path) -> list[Any]:
    """The module's test cases with ``all_model_classes``, set up."""
    relative = path.relative_to(OUTSIDE).with_suffix("")
    module = _import_tests(".".join(relative.parts))
    found = []
    for value in vars(module).values():
        if not (isinstance(value, type) and issubclass(value, unittest.TestCase)):
            continue
        if value.__module__ != module.__name__ or not hasattr(value, "all_model_classes"):
            continue
        case = value("run")
        case.setUp()  # CausalLMModelTest sets all_model_classes here
        if hasattr(case, "model_tester") and case.all_model_classes:
            found.append(case)
    return found


class _Decorators:
    """Stands in for test-only packages (``parameterized``, ``datasets``, ...).

    Their decorators mark test methods, which the sweep never calls: each call returns
    the decorated function or another stand-in.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Decorators()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Decorators()


def _stand_in(name: str) -> None:
    import importlib.machinery
    import types

    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__getattr__ = _Decorators().__getattr__  # type: ignore[method-assign]
    module.__path__ = []  # type: ignore[attr-defined]  # a package: submodules stand in too
    sys.modules[name] = module


def _alarm(_signum: int, _frame: Any) -> None:
    raise PairTimeout(f"over {PAIR_SECONDS} s")


def _pairs(arch: str, path: Path) -> list[tuple[str, Any, Any, str]]:
    """``(head, case, model_class, error)`` for each model class of the arch's testers."""
    pairs: list[tuple[str, Any, Any, str]] = []
    seen: set[str] = set()
    for case in _testers(path):
        for model_class in case.all_model_classes:
            if model_class.__name__ not in seen:
                seen.add(model_class.__name__)
                pairs.append((model_class.__name__, case, model_class, ""))
    return pairs


def _run_pair(case: Any, model_class: Any, exporter: str) -> dict[str, Any]:
    import random

    import numpy
    import torch

    torch.manual_seed(0)
    random.seed(0)  # the testers draw ids with Python's random (ids_tensor)
    numpy.random.seed(0)
    try:
        config, inputs = case.model_tester.prepare_config_and_inputs_for_common()
        if hasattr(case, "_prepare_for_class"):
            inputs = case._prepare_for_class(inputs, model_class)
        model = model_class(config).eval()
        with torch.no_grad():
            eager = model(**_clone(inputs))
    except Exception as e:  # the harness's problem, not an exporter's
        return {"status": "eager_fail", "error": f"{type(e).__name__}: {e}"[:300]}
    start = time.perf_counter()
    signal.alarm(PAIR_SECONDS)
    try:
        export = _export_ours if exporter == "ours" else _export_torch_onnx
        with torch.no_grad():
            actual, warned = export(model, inputs)
        # Flattened after the export: ours registers transformers' caches with pytree.
        worst, where = _compare(actual, _tensor_leaves(eager))
    except BaseException as e:  # every failure is a result here
        if isinstance(e, KeyboardInterrupt):
            raise
        text = f"{type(e).__name__}: {e}"
        first = text.strip().splitlines()[0][:300] if text.strip() else type(e).__name__
        return {
            "status": "fail",
            "reason": reason_class(text[:4000]),
            "error": first,
            "seconds": round(time.perf_counter() - start, 2),
        }
    finally:
        signal.alarm(0)
    status = "ok" if worst == 0.0 else "mismatch"
    if status == "mismatch" and _matches_with_lowest_index_ties(model, inputs, actual):
        status = "ok_ties"
    return {
        "status": status,
        "max_diff": None if worst == 0.0 else worst,
        "where": where,
        "warned": warned,
        "seconds": round(time.perf_counter() - start, 2),
    }


def _worker_arch(arch: str, exporter: str, out: Any) -> None:
    """Run every head of ``arch``; one JSON line per head on ``out``."""
    path = next((OUTSIDE / "tests" / "models" / arch).glob("test_modeling_*.py"))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            pairs = _pairs(arch, path)
    except Exception as e:
        line = {"arch": arch, "head": "*", "exporter": exporter, "status": "eager_fail"}
        line["error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(line), file=out, flush=True)
        return
    if not pairs:
        line = {"arch": arch, "head": "*", "exporter": exporter, "status": "no_model_classes"}
        print(json.dumps(line), file=out, flush=True)
    for head, case, model_class, _ in pairs:
        print(f"START {arch} {head}", file=out, flush=True)
        with contextlib.redirect_stdout(io.StringIO()):
            result = _run_pair(case, model_class, exporter)
        print(json.dumps({"arch": arch, "head": head, "exporter": exporter, **result}), file=out)
        out.flush()


def _matches_with_lowest_index_ties(model: Any, inputs: Any, actual: list[Any]) -> bool:
    """Whether the export matches eager once top-k ties go to the lowest index (ONNX's TopK)."""
    import torch

    from onnx_export.program._ties import lowest_index_topk

    try:
        with torch.no_grad(), lowest_index_topk():
            reference = _tensor_leaves(model(**_clone(inputs)))
        return _compare(actual, reference)[0] == 0.0
    except Exception:  # the reference cannot be made: the mismatch stands
        return False


def worker(archs: list[str], exporter: str) -> None:
    """Run each architecture in turn in this process; ``DONE arch`` after each."""
    import logging

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    sys.path.insert(0, str(OUTSIDE))
    sys.path.insert(1, str(ROOT))
    signal.signal(signal.SIGALRM, _alarm)
    out = sys.stdout
    for arch in archs:
        _worker_arch(arch, exporter, out)
        print(f"DONE {arch}", file=out, flush=True)


# --------------------------------------------------------------------------- sweep side


def architectures(tests: Path) -> list[str]:
    """Every ``tests/models/<arch>`` folder with a ``test_modeling_*.py``."""
    return sorted(p.parent.name for p in (tests / "models").glob("*/test_modeling_*.py"))


def _run_chunk(archs: list[str], exporter: str, timeout: float, cache: Path) -> list[str]:
    """Run ``archs`` in one child process, appending results to ``cache`` as they come.

    Returns the architectures left when the child died or stopped answering (a hang in
    native code, a crash): the one in progress is recorded as failed, the rest are left.
    """
    import queue
    import threading

    command = [sys.executable, __file__, "--worker", ",".join(archs), "--exporters", exporter]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    left, current, started, counts = list(archs), "", time.perf_counter(), collections.Counter()
    while left:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            child.kill()
            line = None
            reason, error = "timeout", f"PairTimeout: no answer for {timeout:.0f} s"
        else:
            reason, error = "other", ""
        if line is None:  # the child ended or hung with architectures left
            child.wait()
            if not error:
                tail = (child.stderr.read() if child.stderr else "").strip().splitlines()[-1:]
                error = tail[0] if tail else f"exit code {child.returncode}"
            record = {"arch": left[0], "head": current or "*", "exporter": exporter}
            record.update({"status": "fail", "reason": reason, "error": error[:300]})
            with cache.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{exporter:10} {left[0]:28} died: {error[:80]}", flush=True)
            return left[1:]
        if line.startswith("START "):
            current = line.split()[-1]
        elif line.startswith("DONE "):
            took = time.perf_counter() - started
            print(f"{exporter:10} {left[0]:28} {dict(counts)} {took:.0f} s", flush=True)
            left, current, started, counts = (
                left[1:],
                "",
                time.perf_counter(),
                collections.Counter(),
            )
        elif line.startswith("{"):
            counts[json.loads(line)["status"]] += 1
            with cache.open("a") as f:
                f.write(line if line.endswith("\n") else line + "\n")
    child.wait()
    return []


def _load(cache: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    records: dict[tuple[str, str, str], dict[str, Any]] = {}
    if cache.exists():
        for line in cache.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                records[(r["arch"], r["head"], r["exporter"])] = r
    return records


def sweep(archs: list[str], exporter: str, cache: Path, timeout: float) -> None:
    """Run ``archs`` in child processes, chunk by chunk; a dead child's rest is retried."""
    left = list(archs)
    while left:
        chunk, left = left[:20], left[20:]
        left = _run_chunk(chunk, exporter, timeout, cache) + left


def report(cache: Path, results: Path, source: str) -> None:
    """The table (ours vs torch.onnx by status and failure class) and the results file."""
    records = _load(cache)
    heads: dict[tuple[str, str], dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for (arch, head, exporter), r in sorted(records.items()):
        heads[(arch, head)][exporter] = r
    eager_ok = {
        k: v
        for k, v in heads.items()
        if k[1] != "*" and all(r["status"] not in ("eager_fail",) for r in v.values())
    }
    listed = sorted({arch for arch, _ in heads})
    print(f"architectures listed: {len(listed)}; (arch, head) pairs that run eagerly: ", end="")
    print(len(eager_ok))
    table: dict[str, collections.Counter[str]] = {e: collections.Counter() for e in EXPORTERS}
    for per in eager_ok.values():
        for exporter in EXPORTERS:
            r = per.get(exporter)
            if r is None:
                table[exporter]["not run"] += 1
            elif r["status"] == "fail":
                table[exporter][f"fail: {r['reason']}"] += 1
            else:
                table[exporter][r["status"]] += 1
    rows = sorted({k for c in table.values() for k in c}, key=lambda k: (k != "ok", k))
    print(f"\n| {'status':32} | {'ours':>6} | {'torch.onnx':>10} |")
    print(f"|{'-' * 34}|{'-' * 8}|{'-' * 12}|")
    for row in rows:
        print(f"| {row:32} | {table['ours'][row]:>6} | {table['torch.onnx'][row]:>10} |")
    for exporter in EXPORTERS:
        print(f"\n{exporter}: every pair that is not ok")
        for (arch, head), per in sorted(eager_ok.items()):
            r = per.get(exporter)
            if r is not None and r["status"] != "ok":
                detail = r.get("reason", "") + " " + str(r.get("max_diff") or r.get("error", ""))
                print(f"  {arch:24} {head:48} {r['status']:9} {detail[:150]}")
    payload = {
        "source": source,
        "tolerance": {"rtol": RTOL, "atol": ATOL},
        "pairs_run_eagerly": len(eager_ok),
        "architectures_listed": len(listed),
        "table": {e: dict(c) for e, c in table.items()},
        "pairs": {f"{a}/{h}": v for (a, h), v in sorted(heads.items())},
    }
    results.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporters", default="ours,torch.onnx")
    parser.add_argument("--only", help="comma-separated architectures (default: all)")
    parser.add_argument("--start", type=int, default=0, help="first architecture's index")
    parser.add_argument("--count", type=int, default=10_000, help="how many architectures")
    parser.add_argument("--force", action="store_true", help="run again what is cached")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per head")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="only print the table")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker.split(","), args.exporters)
        return
    sources = OUTSIDE / "src" / "transformers"  # the tests look for the library's sources
    if OUTSIDE.is_dir() and not sources.exists():
        import transformers

        sources.parent.mkdir(exist_ok=True)
        sources.symlink_to(Path(transformers.__file__).parent)
    source_file = OUTSIDE / "SOURCE"
    source = source_file.read_text().strip() if source_file.exists() else "unknown"
    if not args.report:
        if not (OUTSIDE / "tests" / "models").is_dir():
            sys.exit(f"error: no transformers tests under {OUTSIDE}; see bench/README.md")
        archs = args.only.split(",") if args.only else architectures(OUTSIDE / "tests")
        archs = archs[args.start : args.start + args.count]
        exporters = args.exporters.split(",")
        done = _load(args.cache)
        for exporter in exporters:
            todo = [
                a
                for a in archs
                if args.force or not any(k[0] == a and k[2] == exporter for k in done)
            ]
            sweep(todo, exporter, args.cache, args.timeout)
    report(args.cache, args.json, source)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.exit(130)
