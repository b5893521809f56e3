"""Model zoo side by side: our exporter and torch.onnx.export(dynamo=True).

Every model of ``tests/e2e/zoo_models.py`` (small-config transformers models and torch.nn
patterns), exported with grad mode on and off, with static shapes and with dynamic dims
(run again at other sizes), compared with eager PyTorch in ONNX Runtime. Prints, per
model and case and for each exporter: success, parity (largest absolute difference from
eager), export time, node count, file size and ONNX Runtime latency (median call at the
example size, each exporter's own input/output handling included), then the ratios of
ours to theirs. Writes the results as JSON (``bench/zoo_results.json``), which
``bench_opinfo.py`` adds to ``docs/coverage.md``.

    python bench/bench_zoo.py [--models bert,t5] [--exporters ours]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.zoo_models import ZOO, check  # noqa: E402

RESULTS = ROOT / "bench" / "zoo_results.json"
CASES = [(d, g) for d in (False, True) for g in (True, False)]


def _case_name(dynamic: bool, grad: bool) -> str:
    return f"{'dynamic' if dynamic else 'static'}/{'grad' if grad else 'no_grad'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    parser.add_argument("--exporters", default="ours,torch.onnx")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    names = args.models.split(",") if args.models else list(ZOO)
    exporters = args.exporters.split(",")
    records = json.loads(args.json.read_text()) if args.json.exists() else {}
    for name in names:
        for dynamic, grad in CASES:
            for exporter in exporters:
                result = check(exporter, ZOO[name], dynamic=dynamic, grad=grad, measure=True)
                key = f"{name}|{_case_name(dynamic, grad)}|{exporter}"
                records[key] = {
                    "status": result.status,
                    "reason": result.reason,
                    "seconds": round(result.export_seconds, 2),
                    "max_error": result.max_error,
                    "nodes": result.nodes,
                    "bytes": result.file_bytes,
                    "latency_ms": round(result.latency_ms, 3),
                }
                print(f"{name:22s} {_case_name(dynamic, grad):16s} {exporter:10s} "
                      f"{result.status} {result.export_seconds:5.1f}s {result.reason[:120]}",
                      flush=True)  # fmt: skip
            args.json.write_text(json.dumps(records, indent=1, sort_keys=True))
    print_table(records, exporters)


def _cell(record: dict[str, Any] | None) -> str:
    if record is None:
        return f"{'-':>44s}"
    if record["status"] != "pass":
        return f"{'FAIL':>6s} {record['seconds']:6.1f}s{'':30s}"
    return (
        f"{'ok':>6s} {record['seconds']:6.1f}s {record.get('max_error', 0):8.1e} "
        f"{record.get('nodes', 0):5d} {record.get('bytes', 0) / 1024:7.0f}K "
        f"{record.get('latency_ms', 0):6.2f}ms"
    )


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def print_table(records: dict[str, dict[str, Any]], exporters: list[str]) -> None:
    """One row per model and case: success, parity, export s, nodes, size, latency."""
    header = f"{'status':>6s} {'export':>7s} {'max err':>8s} {'nodes':>5s} {'size':>8s} {'ORT':>8s}"
    print(f"\n{'model':22s} {'case':16s} " + "   ".join(f"{e}: {header}" for e in exporters))
    totals = dict.fromkeys(exporters, 0)
    rows = sorted(
        {k.rsplit("|", 1)[0] for k in records},
        key=lambda k: (list(ZOO).index(k.split("|")[0]) if k.split("|")[0] in ZOO else 999, k),
    )
    ratios: dict[str, list[float]] = {"export time": [], "nodes": [], "size": [], "latency": []}
    for row in rows:
        cells = []
        for exporter in exporters:
            record = records.get(f"{row}|{exporter}")
            totals[exporter] += record is not None and record["status"] == "pass"
            cells.append(_cell(record))
        name, case = row.split("|")
        print(f"{name:22s} {case:16s} " + "   ".join(cells))
        ours, theirs = records.get(f"{row}|ours"), records.get(f"{row}|torch.onnx")
        if ours and theirs and ours["status"] == theirs["status"] == "pass":
            for label, field in (("export time", "seconds"), ("nodes", "nodes"),
                                 ("size", "bytes"), ("latency", "latency_ms")):  # fmt: skip
                if ours.get(field) and theirs.get(field):
                    ratios[label].append(ours[field] / theirs[field])
    print(f"\npassing cases (of {len(rows)}): " + ", ".join(f"{e} {n}" for e, n in totals.items()))
    if any(ratios.values()):
        print("geometric mean ratio ours / torch.onnx where both pass: " + ", ".join(
            f"{label} {_geomean(values):.2f}" for label, values in ratios.items() if values
        ))  # fmt: skip


if __name__ == "__main__":
    main()
