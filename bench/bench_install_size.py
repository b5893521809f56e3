"""Installed size: the runtime (``pip install onnx-export``) against runtime + exporter.

Builds the wheel of this checkout, installs it into two fresh virtual environments, one
without extras (onnx, onnxruntime, numpy) and one with the ``export`` extra (adds torch,
onnxscript, onnx-ir; ``torch==2.13.0`` pinned so pip takes the CPU build), and prints the
size of each environment's site-packages and their ratio.

    python bench/bench_install_size.py
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
import time
import venv

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _size(folder: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _install(work: pathlib.Path, name: str, *requirements: str) -> tuple[int, float, list[str]]:
    env = work / name
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")
    base = _size(env)
    start = time.perf_counter()
    subprocess.run([python, "-m", "pip", "install", "-q", *requirements], check=True)
    seconds = time.perf_counter() - start
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout.split()
    return _size(env) - base, seconds, listed


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(ROOT)],
            check=True,
        )
        (wheel,) = work.glob("onnx_export-*.whl")
        runtime = _install(work, "runtime", str(wheel))
        export = _install(work, "export", f"{wheel}[export]", "torch==2.13.0")
    print(f"{'install':<28} {'MB':>8} {'install s':>10} packages")
    for label, (size, seconds, listed) in (
        ("onnx-export (runtime)", runtime),
        ("onnx-export[export]", export),
    ):
        names = ", ".join(sorted(p.split("==")[0] for p in listed if not p.startswith("pip")))
        print(f"{label:<28} {size / 1e6:8.1f} {seconds:10.1f} {names}")
    print(f"runtime / runtime+export size: {runtime[0] / export[0]:.3f}")


if __name__ == "__main__":
    main()
