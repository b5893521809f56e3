"""Generation benchmark: ``onnx_export.hf`` (ONNX Runtime) against eager ``transformers``.

Two parts, both sides in this one process:

1. Decode speed on CPU: batch 1, a 32-token prompt, 64 new tokens (greedy, no EOS), with
   1 and 2 threads, of ``OrtModelForCausalLM.generate`` against eager ``generate()`` on
   two random-weight Llama configs (about 5M and 135M parameters). It prints tokens/s,
   the ratio, the decode steps' effective weight bandwidth (fp32 weight bytes read per
   token / time per token) and the machine's copy bandwidth measured with numpy (the
   physical limit of a memory-bound decoder), and checks that both sides' tokens agree.
2. Export time of each task's graphs: ``onnx_export.dynamo_export`` against
   ``torch.onnx.export(..., dynamo=True)`` on the same wrapper modules and example inputs
   (the tests' tiny checkpoints), each result run in ONNX Runtime against eager.

    python bench/bench_generate.py [--skip-large] [--skip-export] [--skip-decode]
        [--cases t5,bart] [--repeat 2]
    python bench/bench_generate.py --genai [--skip-large]   # beside onnxruntime-genai
"""

from __future__ import annotations

import os

# torch's OpenMP threads spin after each eager op (libgomp's default wait policy): with two
# threads on two cores they keep a core from the tool timed next, which then runs up to
# 2x slower (seen here at --threads 2). libgomp reads this when it loads, before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import pathlib
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import transformers as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from onnx_export import hf

PROMPT, NEW = 32, 64

CONFIGS = {
    "llama-5M": {
        "vocab_size": 4000,
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "llama-135M": {
        "vocab_size": 32000,
        "hidden_size": 768,
        "intermediate_size": 2432,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
    },
}


def copy_bandwidth(megabytes: int = 512) -> tuple[float, float]:
    """numpy on a large array, best of 5: copy (GB/s of read + write traffic) and a
    read-only pass (``max``), the limit of a decoder that only reads its weights."""
    src = np.ones(megabytes * 2**20 // 4, np.float32)
    dst = np.empty_like(src)
    best_copy = best_read = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(dst, src)
        best_copy = min(best_copy, time.perf_counter() - start)
        start = time.perf_counter()
        src.max()
        best_read = min(best_read, time.perf_counter() - start)
    return 2 * src.nbytes / best_copy / 1e9, src.nbytes / best_read / 1e9


def _llama(name: str, folder: pathlib.Path) -> tuple[Any, pathlib.Path, int]:
    torch.manual_seed(0)
    config = tf.LlamaConfig(
        **CONFIGS[name], max_position_embeddings=256, eos_token_id=None, pad_token_id=0
    )
    model = tf.LlamaForCausalLM(config).eval()
    model.save_pretrained(folder / name)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return model, folder / name, weight_bytes


def _timed(run: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def _ours(path: pathlib.Path, threads: int) -> hf.OrtModelForCausalLM:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return hf.OrtModelForCausalLM.from_pretrained(path, session_options=options)


def _eager_run(model: Any, ids: torch.Tensor, repeat: int) -> tuple[float, float, Any]:
    """Best-of-``repeat`` seconds of ``generate()`` and of the prompt alone; the tokens."""
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, do_sample=False)  # warm-up
        total, out = _timed(
            lambda: model.generate(ids, max_new_tokens=NEW, do_sample=False), repeat
        )
        prefill, _ = _timed(lambda: model(ids), repeat)
    return total, prefill, out.numpy()


def _ours_run(ours: hf.OrtModelForCausalLM, ids: Any, repeat: int) -> tuple[float, float, Any]:
    ours.generate(ids, max_new_tokens=4)  # warm-up
    total, out = _timed(lambda: ours.generate(ids, max_new_tokens=NEW), repeat)
    prefill, _ = _timed(lambda: ours.logits(ids), repeat)
    return total, prefill, out


def decode_speed(
    names: list[str], repeat: int, folder: pathlib.Path, bandwidth: tuple[float, float]
) -> None:
    copy_gbs, read_gbs = bandwidth
    print(f"\n== Decode: batch 1, prompt {PROMPT}, {NEW} new tokens (greedy) ==")
    print(
        f"numpy, one thread, 512 MB: copy {copy_gbs:.1f} GB/s (read + write traffic), "
        f"read-only (max) {read_gbs:.1f} GB/s; '% of read' below is against the latter"
    )
    header = (
        f"{'model':<11} {'params':>7} {'thr':>3} {'eager tok/s':>11} {'ours tok/s':>10} "
        f"{'ratio':>6} {'eager ms/step':>13} {'ours ms/step':>12} {'ours GB/s':>9} "
        f"{'% of read':>9} same"
    )
    for name in names:
        model, path, weight_bytes = _llama(name, folder)
        start = time.perf_counter()
        hf.export_pretrained(path, folder / f"{name}-onnx")
        print(f"{name}: exported in {time.perf_counter() - start:.1f} s")
        print(header)
        ids = torch.randint(1, 4000, (1, PROMPT), generator=torch.Generator().manual_seed(0))
        for threads in (1, 2):
            torch.set_num_threads(threads)
            ours = _ours(folder / f"{name}-onnx", threads)
            eager_s, eager_prefill, eager_out = _eager_run(model, ids, repeat)
            ours_s, ours_prefill, ours_out = _ours_run(ours, ids.numpy(), repeat)
            same = np.array_equal(eager_out, ours_out)
            eager_step = (eager_s - eager_prefill) / (NEW - 1)
            ours_step = (ours_s - ours_prefill) / (NEW - 1)
            gbs = weight_bytes / ours_step / 1e9
            print(
                f"{name:<11} {weight_bytes / 4e6:>6.1f}M {threads:>3} {NEW / eager_s:>11.1f} "
                f"{NEW / ours_s:>10.1f} {eager_s / ours_s:>5.2f}x {eager_step * 1e3:>13.2f} "
                f"{ours_step * 1e3:>12.2f} {gbs:>9.1f} {100 * gbs / read_gbs:>8.0f}% {same}"
            )
        torch.set_num_threads(2)


def _check(path: pathlib.Path, spec: Any) -> str:
    """Run the saved graph on the example inputs; the max abs error of the first output."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    leaves = [v for v in torch.utils._pytree.tree_leaves(spec.args) if isinstance(v, torch.Tensor)]
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(leaves):
        return f"{len(names)} inputs for {len(leaves)} tensors"
    got = session.run(None, dict(zip(names, [t.numpy() for t in leaves], strict=True)))[0]
    with torch.no_grad():
        want = torch.utils._pytree.tree_leaves(spec.module(*spec.args))[0].numpy()
    return f"err {np.abs(got - want).max():.1e}"


def _ours_export(spec: Any, path: pathlib.Path) -> None:
    import onnx_export

    options = onnx_export.ExportOptions(dynamic_shapes=spec.dynamic_shapes)
    onnx_export.dynamo_export(spec.module, *spec.args, export_options=options).save(path)


def _torch_export(spec: Any, path: pathlib.Path) -> None:
    from onnx_export._options import DEFAULT_OPSET  # both exporters at the same opset

    program = torch.onnx.export(
        spec.module,
        spec.args,
        dynamo=True,
        dynamic_shapes=spec.dynamic_shapes,
        opset_version=DEFAULT_OPSET,
        verbose=False,
    )
    program.save(str(path))


def _export_one(exporter: Any, specs: list[Any], folder: pathlib.Path) -> str:
    start = time.perf_counter()
    try:
        for spec in specs:
            exporter(spec, folder / spec.file_name)
    except Exception as e:
        return f"fail: {type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''}"
    seconds = time.perf_counter() - start
    errors = [_check(folder / spec.file_name, spec) for spec in specs]
    return f"{seconds:5.1f} s, {'; '.join(errors)}"


def export_times(folder: pathlib.Path, only: list[str] | None) -> None:
    from onnx_export.hf.export._task_graphs import graphs_for_task
    from tests.hf.checkpoints import CASES

    print("\n== Export time per task (the same wrapper modules and example inputs) ==")
    print(f"{'case':<9} {'task':<29} {'onnx_export':<34} torch.onnx.export(dynamo=True)")
    for name, case in CASES.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        model = case.build().eval()
        with torch.no_grad():
            specs = graphs_for_task(model, case.task)
            results = []
            for label, exporter in (("ours", _ours_export), ("torch", _torch_export)):
                out = folder / f"{name}-{label}"
                out.mkdir()
                results.append(_export_one(exporter, specs, out))
        print(f"{name:<9} {case.task:<29} {results[0]:<34} {results[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-large", action="store_true", help="only the 5M Llama")
    parser.add_argument("--skip-export", action="store_true", help="no export-time table")
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs")
    parser.add_argument("--cases", default="", help="comma-separated export cases (all)")
    parser.add_argument("--skip-decode", action="store_true", help="no decode-speed table")
    parser.add_argument(
        "--genai",
        action="store_true",
        help="only the side-by-side with onnxruntime-genai (bench/bench_genai.py, 1 thread)",
    )
    args = parser.parse_args()
    if args.genai:
        from bench import bench_genai

        sys.argv = [sys.argv[0], "--sizes", "llama-5M" if args.skip_large else ",".join(CONFIGS)]
        bench_genai.main()
        return
    warnings.filterwarnings("ignore")
    tf.logging.set_verbosity_error()
    print(
        f"torch {torch.__version__}, transformers {tf.__version__}, onnxruntime {ort.__version__}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        names = ["llama-5M"] if args.skip_large else list(CONFIGS)
        if not args.skip_decode:
            decode_speed(names, args.repeat, folder, copy_bandwidth())
        if not args.skip_export:
            export_times(folder, [c for c in args.cases.split(",") if c] or None)


if __name__ == "__main__":
    main()
