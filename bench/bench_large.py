"""Large-model benchmark: memory, time split, fake mode and per-layer scaling (not run in CI).

Every measurement runs in its own child process, so that each peak RSS (the child's
``ru_maxrss``) belongs to one export alone. Parts:

(a) ``--gb N`` of real fp32 Llama weights (default 0.5 GB, which fits a shared machine;
    the issue's figure is 3 GB: ``--gb 3``): export time, save time and peak RSS of ours
    and of ``torch.onnx.export(..., dynamo=True)``, against ``dd ... conv=fsync`` writing
    the same number of bytes.
(b) A 7B Llama config (``LlamaConfig()`` defaults, ``use_cache=False``, 16 tokens) built
    from fake tensors: ours (optimizer on) against torch.onnx (``optimize=False``, the
    only setting in which its optimizer works under fake tensors).
(c) A small Llama with 2, 8 and 32 identical layers: export time per layer (it should not
    grow with the layer count).

    python bench/bench_large.py [--parts a,b,c] [--gb 0.5] [--layers 2,8,32] [--repeat 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

OPSET = 18
_HIDDEN, _INTERMEDIATE, _VOCAB = 1024, 2816, 32000


# -- models ----------------------------------------------------------------------------------


def _llama_config(**overrides: Any) -> Any:
    import transformers

    return transformers.LlamaConfig(use_cache=False, **overrides)


def _sized_config(gb: float) -> Any:
    per_layer = 4 * _HIDDEN * _HIDDEN + 3 * _HIDDEN * _INTERMEDIATE
    fixed = 2 * _VOCAB * _HIDDEN
    layers = max(1, round((gb * 2**30 / 4 - fixed) / per_layer))
    return _llama_config(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=_VOCAB,
        max_position_embeddings=256,
    )


def _layers_config(layers: int) -> Any:
    return _llama_config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
    )


def _wrapped(model: Any) -> Any:
    from tests.onnx_export.test_large_models import Logits  # the tests' wrapper

    return Logits(model).eval()


# -- the child process -----------------------------------------------------------------------


def _rss_gb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**30


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _build(job: dict[str, Any]) -> tuple[Any, Any, float]:
    import torch
    import transformers

    config = _sized_config(job["gb"]) if job["kind"] == "sized" else None
    if job["kind"] == "fake7b":
        config = _llama_config()
    if job["kind"] == "layers":
        config = _layers_config(job["layers"])
    torch.manual_seed(0)
    if job["kind"] == "fake7b":
        if job["exporter"] == "ours":
            import onnx_export

            mode: Any = onnx_export.enable_fake_mode()
        else:
            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
        with mode:
            model = _wrapped(transformers.LlamaForCausalLM(config))
            ids = torch.randint(0, config.vocab_size, (1, 16))
    else:
        model = _wrapped(transformers.LlamaForCausalLM(config))
        ids = torch.randint(0, config.vocab_size, (1, 16))
    weights = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
    return model, ids, weights


def _export(job: dict[str, Any], model: Any, ids: Any) -> Any:
    import torch

    if job["exporter"] == "ours":
        import onnx_export

        return onnx_export.dynamo_export(
            model, ids, export_options=onnx_export.ExportOptions(opset_version=OPSET)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(
            model,
            (ids,),
            dynamo=True,
            verbose=False,
            opset_version=OPSET,
            optimize=job["kind"] != "fake7b",
        )


def _child(job: dict[str, Any]) -> dict[str, Any]:
    import torch
    import transformers  # noqa: F401  # imports count in the baseline, not in the export

    import onnx_export  # noqa: F401

    base_rss = _rss_gb()
    with torch.no_grad():
        model, ids, weights = _build(job)
        built_rss, built_peak = _rss_gb(), _peak_gb()
        start = time.perf_counter()
        program = _export(job, model, ids)
        export_s = time.perf_counter() - start
    result = {
        "weights_gb": weights,
        "base_rss_gb": base_rss,
        "built_rss_gb": built_rss,
        "built_peak_gb": built_peak,
        "export_s": export_s,
    }
    if job.get("save"):
        path = pathlib.Path(job["folder"]) / f"{job['exporter']}.onnx"
        # The disk's own speed right before and after this save (shared disks drift).
        dd_before = _dd_seconds(path.parent, weights)
        start = time.perf_counter()
        program.save(path)
        result["save_s"] = time.perf_counter() - start
        result["dd_s"] = (dd_before + _dd_seconds(path.parent, weights)) / 2
        result["file_gb"] = sum(p.stat().st_size for p in path.parent.glob(f"{path.name}*")) / 2**30
    result["peak_rss_gb"] = _peak_gb()
    return result


def _run(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job in a fresh interpreter; return its JSON result (or its error)."""
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]))
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(lines[-1])  # type: ignore[no-any-return]


# -- the parts -------------------------------------------------------------------------------


def _dd_seconds(folder: pathlib.Path, gb: float) -> float:
    count = max(1, round(gb * 1024))
    start = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={folder / 'dd.bin'}", "bs=1M", f"count={count}", "conv=fsync"],
        capture_output=True,
        check=True,
    )
    seconds = time.perf_counter() - start
    (folder / "dd.bin").unlink()
    return seconds


def _fmt(result: dict[str, Any], key: str) -> str:
    value = result.get(key)
    return f"{value:.2f}" if isinstance(value, float) else "-"


def part_a(gb: float) -> None:
    print(f"\n(a) Llama with ~{gb} GB of real fp32 weights, export + save (issue: 3 GB)")
    print(
        "peak RSS is the child's whole life; 'extra' is peak RSS minus RSS with the model "
        "built, in units of the weights' size (0 = no copy of the weights)"
    )
    print(
        f"{'exporter':12} {'weights GB':>10} {'export s':>9} {'save s':>7} {'base GB':>8} "
        f"{'built GB':>8} {'peak GB':>8} {'extra':>6} {'file GB':>8}"
    )
    results = {}
    for exporter in ("ours", "torch.onnx"):
        with tempfile.TemporaryDirectory(dir=pathlib.Path.cwd()) as folder:
            job = {"kind": "sized", "gb": gb, "exporter": exporter, "save": True, "folder": folder}
            result = results[exporter] = _run(job)
        if "error" in result:
            print(f"{exporter:12} failed: {result['error']}")
            continue
        extra = (result["peak_rss_gb"] - result["built_rss_gb"]) / result["weights_gb"]
        print(
            f"{exporter:12} {_fmt(result, 'weights_gb'):>10} {_fmt(result, 'export_s'):>9} "
            f"{_fmt(result, 'save_s'):>7} {_fmt(result, 'base_rss_gb'):>8} "
            f"{_fmt(result, 'built_rss_gb'):>8} {_fmt(result, 'peak_rss_gb'):>8} {extra:6.2f} "
            f"{_fmt(result, 'file_gb'):>8}"
        )
    ours, theirs = results["ours"], results["torch.onnx"]
    for exporter, result in results.items():
        if "error" not in result:
            print(
                f"{exporter}: save {result['save_s']:.2f} s, dd conv=fsync of the same bytes "
                f"{result['dd_s']:.2f} s (mean of right before and right after): "
                f"save / dd {result['save_s'] / result['dd_s']:.2f}"
            )
    if "error" not in ours and "error" not in theirs:
        for key in ("export_s", "save_s", "peak_rss_gb"):
            print(f"{key} ours / torch.onnx: {ours[key] / theirs[key]:.2f}")


def part_b() -> None:
    print("\n(b) 7B Llama config from fake tensors (use_cache=False, 16 tokens)")
    results = {}
    for exporter in ("ours", "torch.onnx"):
        result = results[exporter] = _run({"kind": "fake7b", "exporter": exporter})
        label = f"{exporter} ({'optimize on' if exporter == 'ours' else 'optimize=False'})"
        if "error" in result:
            print(f"{label:28} failed: {result['error']}")
            continue
        print(
            f"{label:28} export {result['export_s']:.2f} s, peak RSS "
            f"{result['peak_rss_gb']:.2f} GB (real weights: {result['weights_gb']:.1f} GB)"
        )
    if all("error" not in r for r in results.values()):
        ours, theirs = results["ours"], results["torch.onnx"]
        print(
            f"export time ours / torch.onnx: {ours['export_s'] / theirs['export_s']:.2f}; "
            f"peak RSS: {ours['peak_rss_gb'] / theirs['peak_rss_gb']:.2f}"
        )


def part_c(layer_counts: list[int], repeat: int) -> None:
    print(f"\n(c) identical layers: export time per layer (ours; best of {repeat})")
    times = {}
    for layers in layer_counts:
        runs = [
            _run({"kind": "layers", "layers": layers, "exporter": "ours"}) for _ in range(repeat)
        ]
        ok = [r for r in runs if "error" not in r]
        result = min(ok, key=lambda r: float(r["export_s"])) if ok else runs[0]
        if "error" in result:
            print(f"{layers:3d} layers: failed: {result['error']}")
            continue
        times[layers] = result["export_s"]
        print(
            f"{layers:3d} layers: export {result['export_s']:.2f} s, "
            f"{result['export_s'] / layers:.3f} s/layer"
        )
    counts = sorted(times)
    for low, high in itertools.pairwise(counts):
        marginal = (times[high] - times[low]) / (high - low)
        print(f"marginal s/layer from {low} to {high} layers: {marginal:.3f}")
    if len(counts) >= 3:
        # The first interval mostly measures fixed costs (a 2-layer export is dominated by
        # them), so linearity is read on the last two intervals.
        before = (times[counts[-2]] - times[counts[-3]]) / (counts[-2] - counts[-3])
        last = (times[counts[-1]] - times[counts[-2]]) / (counts[-1] - counts[-2])
        print(f"ratio of the last two marginal costs (1.0 = linear): {last / before:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="a,b,c")
    parser.add_argument("--gb", type=float, default=0.5, help="(a): GB of fp32 weights")
    parser.add_argument("--layers", default="2,8,32", help="(c): layer counts")
    parser.add_argument("--repeat", type=int, default=2, help="(c): runs per layer count")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return
    parts = args.parts.split(",")
    if "a" in parts:
        part_a(args.gb)
    if "b" in parts:
        part_b()
    if "c" in parts:
        part_c([int(n) for n in args.layers.split(",")], args.repeat)


if __name__ == "__main__":
    main()
