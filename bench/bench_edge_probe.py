"""What the edge probe costs: its share of our export time over the zoo models.

Each model of ``tests/e2e/zoo_models.py`` (``--tier small`` by default, ``full`` for all)
is exported with its dynamic dims (``ZooModel.dynamic``), as a user exporting for
serving does; ``ONNXProgram.stage_times["edge probe"]`` is the probe's time (the smallest
sizes of the dynamic axes and a fully masked row of each mask-like input, each an eager
run and an ONNX Runtime run on the session the parity check built). Prints per model the
probe's seconds and share of the export, then the median and worst share.

    python bench/bench_edge_probe.py [--tier small|full] [--models bert,gpt2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.zoo_models import ZOO  # noqa: E402


def measure(name: str) -> tuple[float, float] | str:
    """``(probe seconds, total seconds)`` of one export, or why it did not run."""
    import onnx_export

    entry = ZOO[name]
    model = entry.build()
    args, kwargs = entry.inputs(*entry.size)
    options = onnx_export.ExportOptions(dynamic_shapes=entry.dynamic)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            program = onnx_export.dynamo_export(model, *args, export_options=options, **kwargs)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    times = program.stage_times
    return times.get("edge probe", 0.0), times["total"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="small", choices=["small", "full"])
    parser.add_argument("--models", help="comma-separated names (default: the tier)")
    given = parser.parse_args()
    names = (
        given.models.split(",")
        if given.models
        else [n for n, e in ZOO.items() if given.tier == "full" or e.tier == "small"]
    )
    shares = []
    print(f"{'model':<24} {'probe s':>8} {'total s':>8} {'share':>7}")
    for name in names:
        found = measure(name)
        if isinstance(found, str):
            print(f"{name:<24} {found}")
            continue
        probe, total = found
        shares.append(probe / total)
        print(f"{name:<24} {probe:8.3f} {total:8.3f} {probe / total:7.1%}")
    if shares:
        median, worst = statistics.median(shares), max(shares)
        print(f"median share {median:.1%}, worst {worst:.1%}, n={len(shares)}")


if __name__ == "__main__":
    main()
