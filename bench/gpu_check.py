"""The GPU check of issue #29: half precision and CUDA end to end, one command, one table.

On one GPU (under 8 minutes on an H200) it runs, and prints as one Markdown table:

1. A CNN, a BERT-style encoder and a ~135M Llama (SmolLM-135M's shape, random weights)
   exported with ``dynamo_export`` in float32 and in float16 (``ExportOptions(dtype=...)``),
   each loaded with ``onnx_export.load(path, providers=["cuda"])`` and called with torch
   CUDA tensors (IO binding, no host copy), compared with eager PyTorch on CUDA in the same
   dtype; milliseconds per call of both.
2. The HF runtime: ``onnx-export hf --dtype float16 --target onnxruntime`` of the Llama,
   ``OrtModelForCausalLM`` on CUDA, greedy tokens against transformers' ``generate`` on
   CUDA in float16 (equal, or the first differing position where two logits tie within
   float16's rounding).
3. ``cuda_graph=True``: the decode steps recorded once as a CUDA graph and replayed give
   the tokens of the usual loop (on the CPU: refused with ``CudaGraphError``, and the same
   fixed-address loop checked without recording).
4. Decode tokens/s, batch 1 and batch 8, 32-token prompt + 64 new tokens, greedy: ours
   (fp16, fp16 with CUDA graphs, fp16 + int4), onnxruntime-genai-cuda's own builder at the
   same precisions (``-p fp16|int4 -e cuda``) and eager transformers on CUDA in float16.

The rows live in ``bench/_gpu_rows.py`` and ``bench/_gpu_decode.py``; the CUDA-graph and
genai rows say ``FAILED`` (with the error) when they fail, and the table goes on. The first
row gives the versions it ran with.

It installs ``onnxruntime-gpu`` and ``onnxruntime-genai-cuda`` itself, into a folder of its
own put first on ``PYTHONPATH`` (the CPU ``onnxruntime`` left installed): from PyPI, or with
``--wheels DIR`` from wheel files there without the network (``pip --no-index``; every
wheel there is installed, so newer pure-Python packages than a machine's image has, say
``onnx-ir``, can travel beside them); a wheel split into ``NAME.whl.part-*`` pieces (to
travel in pieces of a size limit) is joined first. Then it runs itself again with that
folder on the path.

``--dry-run`` does the same on the CPU with tiny models and nothing installed: exports in
both precisions, checks against eager (float16 where the CPU provider has kernels, else the
float32 upcast), greedy tokens, the table; the CUDA and genai rows say ``skipped``. CI runs
it (tests/test_gpu_check.py).

    python bench/gpu_check.py [--dry-run] [--wheels DIR] [--site DIR] [--out table.md]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

# beside this file (the script's folder is first on sys.path)
from _gpu_decode import check_cuda_graph, check_decode_speed
from _gpu_rows import Table, check_exports, check_greedy, export_llama_folders

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU_PACKAGES = ("onnxruntime-gpu", "onnxruntime-genai-cuda")
# ---- installing the GPU packages (before onnxruntime is imported) --------------------------


def _cuda_runtime_ready() -> bool:
    probe = (
        "import onnxruntime as o, onnxruntime_genai;"
        "import sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False)
    return done.returncode == 0


def wheel_files(folder: pathlib.Path, scratch: pathlib.Path) -> list[pathlib.Path]:
    """The wheels in ``folder``, with ``NAME.whl.part-*`` pieces joined into ``scratch``."""
    wheels = sorted(folder.glob("*.whl"))
    pieces: dict[str, list[pathlib.Path]] = {}
    for piece in sorted(folder.glob("*.whl.part-*")):
        pieces.setdefault(piece.name.split(".part-")[0], []).append(piece)
    for name, parts in pieces.items():
        joined = scratch / name
        with joined.open("wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        wheels.append(joined)
    if not wheels:
        raise SystemExit(f"error: no *.whl (or *.whl.part-*) files in {folder}")
    return wheels


def install_and_rerun(args: argparse.Namespace, argv: list[str]) -> None:
    """Install the GPU packages into ``args.site`` unless they work already; run again."""
    if _cuda_runtime_ready():
        return
    site = pathlib.Path(args.site)
    site.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--no-deps"]
    command += ["--no-compile", "--target", str(site)]
    if args.wheels:
        scratch = pathlib.Path(tempfile.mkdtemp(prefix="gpu_check_wheels-"))
        files = wheel_files(pathlib.Path(args.wheels), scratch)
        command += ["--no-index", *map(str, files)]
    else:
        command += list(GPU_PACKAGES)
    print("installing:", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    os.execve(sys.executable, [sys.executable, __file__, *argv, "--no-install"], env)


def _require_usable_cuda() -> None:
    import onnxruntime as ort
    import torch

    if hasattr(ort, "preload_dlls"):  # CUDA and cuDNN from torch's nvidia-* packages
        ort.preload_dlls()
    if not torch.cuda.is_available() or "CUDAExecutionProvider" not in (
        ort.get_available_providers()
    ):
        raise SystemExit(
            f"error: CUDA is not usable here (torch.cuda: {torch.cuda.is_available()}, "
            f"onnxruntime {ort.__version__} providers: {ort.get_available_providers()}). "
            "Run with --dry-run on a machine without a GPU."
        )


def run_checks(args: argparse.Namespace) -> Table:
    device = "cpu" if args.dry_run else "cuda"
    size = "tiny" if args.dry_run else "full"
    if device == "cuda":
        _require_usable_cuda()
    table = Table()
    table.add("versions", device, _versions(), "", "", "")
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="gpu_check-"))
    try:
        check_exports(table, size, device, scratch)
        model, folders = export_llama_folders(size, device, scratch / "llama", table)
        check_greedy(model, folders["ours fp16"], device, table)
        check_cuda_graph(model, folders["ours fp16"], device, table)
        check_decode_speed(model, folders, scratch / "llama", device, table)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return table


def _versions() -> str:
    """The versions the table was made with (the GPU machine's image has its own)."""
    from importlib import metadata

    found = []
    for name in ("torch", "transformers", "onnxruntime-gpu", "onnxruntime", "onnx-ir"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny models, no install")
    parser.add_argument("--wheels", default=None, help="install the GPU packages from here")
    parser.add_argument("--site", default="/tmp/gpu_check_site", help="where to install them")
    parser.add_argument("--no-install", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    if not args.dry_run and not args.no_install:
        install_and_rerun(args, argv)
    sys.path.insert(0, str(ROOT))
    started = time.perf_counter()
    table = run_checks(args)
    text = table.markdown()
    print(f"\n{text}\n\n(all checks in {time.perf_counter() - started:.0f} s)")
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
