"""Older opsets side by side: our exporter and torch.onnx.export(dynamo=True, opset_version=N).

Every model of ``tests/e2e/zoo_models.py``, exported with dynamic dims under ``no_grad``
and asked for opset 13, 14 and 15 (and 17, 18 for reference), run in ONNX Runtime at the
example size and the other sizes, compared with eager PyTorch. A model counts for an
exporter at an opset when the export works, its file declares the opset that was asked
(torch.onnx builds at 18 and keeps 18 where onnx's converter fails), and every output
matches eager. Prints the table of ``docs/coverage.md`` and, per failure, the first line
of the reason; writes ``bench/opset_results.json``.

    python bench/bench_opsets.py [--opsets 13,14,15] [--models bert,t5] [--exporters ours]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.zoo_models import ZOO, check  # noqa: E402

RESULTS = ROOT / "bench" / "opset_results.json"


def _outcome(status: str, declared: int, asked: int) -> str:
    if status != "pass":
        return "fail"
    return "ok" if declared == asked else f"at {declared}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opsets", default="13,14,15")
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    parser.add_argument("--exporters", default="ours,torch.onnx")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    logging.getLogger("onnxscript").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    names = args.models.split(",") if args.models else list(ZOO)
    records: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    for opset in (int(o) for o in args.opsets.split(",")):
        for name in names:
            for exporter in args.exporters.split(","):
                result = check(exporter, ZOO[name], dynamic=True, grad=False, opset=opset)
                outcome = _outcome(result.status, result.opset, opset)
                records[f"{opset}|{name}|{exporter}"] = {
                    "outcome": outcome,
                    "declared": result.opset,
                    "reason": result.reason,
                    "max_error": result.max_error,
                }
                print(f"{opset} {name:22s} {exporter:10s} {outcome:6s} {result.reason[:160]}",
                      flush=True)  # fmt: skip
            args.json.write_text(json.dumps(records, indent=1, sort_keys=True))
    print_table(records)


def print_table(records: dict[str, Any]) -> None:
    """Per opset and exporter: models at the asked opset matching eager, and the rest."""
    opsets = sorted({int(k.split("|")[0]) for k in records})
    exporters = sorted({k.split("|")[2] for k in records}, key=lambda e: e != "ours")
    print("\n| opset asked | exporter | at that opset, matching eager | at another opset | "
          "failed | models |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for opset in opsets:
        for exporter in exporters:
            rows = [v for k, v in records.items() if k.startswith(f"{opset}|") and
                    k.endswith(f"|{exporter}")]  # fmt: skip
            ok = sum(r["outcome"] == "ok" for r in rows)
            other = sum(r["outcome"].startswith("at ") for r in rows)
            print(f"| {opset} | {exporter} | {ok} | {other} | {len(rows) - ok - other} | "
                  f"{len(rows)} |")  # fmt: skip


if __name__ == "__main__":
    main()
