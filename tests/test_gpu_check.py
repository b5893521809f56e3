"""``bench/gpu_check.py --dry-run``: the GPU check's exports, comparisons and table, on the CPU.

On a GPU the same script installs onnxruntime-gpu and onnxruntime-genai-cuda and runs the
CUDA rows (docs/performance.md has the command); here it must run through, with every
comparison it can make on the CPU passing (the CUDA-graph loop without recording, too).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_prints_one_passing_table(tmp_path: pathlib.Path) -> None:
    table = tmp_path / "table.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run", "--out", str(table)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = table.read_text().splitlines()
    assert rows[0].startswith("| check | variant | result |")
    for model in ("CNN", "BERT encoder", "Llama"):
        for dtype in ("float32", "float16"):
            row = next(r for r in rows if r.startswith(f"| {model} vs eager (cpu) | {dtype} |"))
            assert "| ok: max error" in row, row
    greedy = next(r for r in rows if "greedy tokens vs transformers" in r)
    assert "| equal" in greedy, greedy  # equal, or equal up to a float16 tie
    graph = next(r for r in rows if r.startswith("| cuda_graph=True tokens vs without (cpu) |"))
    assert "| equal |" in graph and "refused (CudaGraphError)" in graph, graph
    assert rows[2].startswith("| versions | cpu | torch ")
    assert sum("tokens/s" in r for r in rows) == 4  # ours fp16 and fp16 + int4, batch 1 and 8
    assert any("skipped (no CUDA)" in r for r in rows)
    assert "DIFFERENT" not in table.read_text() and "MISMATCH" not in table.read_text()
