"""Call the runtime on an exported folder in a subprocess where torch cannot be imported."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np

_WORKER = pathlib.Path(__file__).with_name("torch_free_worker.py")
_ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Call:
    """One call: ``method`` of the runtime model (or ``"run"`` of a plain session)."""

    name: str
    method: str
    arrays: dict[str, np.ndarray]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def run_without_torch(folder: pathlib.Path, calls: list[Call]) -> dict[str, np.ndarray]:
    """Make ``calls`` on ``folder`` in a fresh process without torch; their results by name."""
    work = folder.parent / f"{folder.name}-job"
    work.mkdir(exist_ok=True)
    inputs = {f"{c.name}.{k}": v for c in calls for k, v in c.arrays.items()}
    np.savez(work / "inputs.npz", **inputs)
    job = {
        "folder": str(folder),
        "inputs": str(work / "inputs.npz"),
        "outputs": str(work / "outputs.npz"),
        "calls": [
            {
                "name": c.name,
                "method": c.method,
                "arrays": {k: f"{c.name}.{k}" for k in c.arrays},
                "kwargs": c.kwargs,
            }
            for c in calls
        ],
    }
    (work / "job.json").write_text(json.dumps(job))
    done = subprocess.run(
        [sys.executable, str(_WORKER), str(work / "job.json")],
        capture_output=True,
        text=True,
        check=False,
        cwd=_ROOT,
        env=None,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(work / "outputs.npz") as data:
        return {k: data[k] for k in data.files}
