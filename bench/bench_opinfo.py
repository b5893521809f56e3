"""OpInfo sweep: our exporter and torch.onnx.export(dynamo=True) side by side.

For every entry of torch's ``op_db`` (or those ``--ops`` names), the first ``--samples``
CPU samples in the op's primary dtype (float32; int64 or complex64 for ops without
float32) are wrapped in a module, exported by each exporter, run in ONNX Runtime and
compared with eager PyTorch, using the tolerances and skips of the op test table
(``tests/ops/ops_test_data.py``). ``--dtypes all`` adds float16, int64 and bool samples.

Prints per-status counts of both exporters and every op where either fails, with the
reason; writes the results as JSON (merged into an earlier file, so that partial runs
update it) and the coverage table ``docs/coverage.md``.

    python bench/bench_opinfo.py [--ops abs,fft.*] [--limit 50] [--exporters ours]
    python bench/bench_opinfo.py --report-only     # rebuild docs/coverage.md from JSON
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import logging
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ops import ops_test_data as table  # noqa: E402
from tests.ops.opinfo_harness import EXPORTERS, check_op, op_db_by_key  # noqa: E402

RESULTS = ROOT / "bench" / "opinfo_results.json"
COVERAGE = ROOT / "docs" / "coverage.md"
STATUSES = ("pass", "fail", "skip")


def _dtype_name(dtype: torch.dtype | None) -> str:
    return str(dtype).replace("torch.", "") if dtype is not None else "-"


def _dtypes_for(entry: table.OpTest, opinfo: Any, mode: str) -> list[torch.dtype | None]:
    primary = table.primary_dtype(entry, opinfo)
    if mode == "primary":
        return [primary]
    supported = opinfo.supported_dtypes("cpu")
    extra = [d for d in table.SWEEP_DTYPES if d in supported and d != primary]
    return [primary, *extra]


def _run_one(
    key: str, opinfo: Any, dtype: torch.dtype | None, exporter: str, args: argparse.Namespace
) -> dict[str, Any]:
    entry = table.entry_for(key)
    record: dict[str, Any] = {"op": key, "dtype": _dtype_name(dtype), "exporter": exporter}
    expectation = entry.expectation(dtype) if dtype is not None else None
    if dtype is None:
        return record | {"status": "skip", "reason": "supports none of the tested dtypes"}
    if expectation is not None and expectation.kind == "skip":
        return record | {"status": "skip", "reason": expectation.reason}
    result = check_op(
        exporter,
        opinfo,
        dtype,
        count=args.samples,
        tolerance=entry.tol,
        shape_only=entry.compare_shape_only,
        timeout=args.timeout,
        skip_samples=entry.skipped_samples,
    )
    record |= {"status": result.status, "reason": result.reason, "seconds": result.seconds}
    if exporter == "ours":
        record["expected"] = "fail" if expectation is not None else "pass"
    return record


def _selected(args: argparse.Namespace) -> list[str]:
    keys = list(op_db_by_key())
    if args.ops:
        patterns = args.ops.split(",")
        keys = [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]
    return keys[: args.limit] if args.limit else keys


def _load(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    records = json.loads(path.read_text())
    return {_record_id(r): r for r in records}


def _record_id(record: dict[str, Any]) -> str:
    return f"{record['op']}|{record['dtype']}|{record['exporter']}"


def _save(path: Path, records: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(list(records.values()), indent=0))
    tmp.replace(path)


def sweep(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    records = _load(args.json)
    db = op_db_by_key()
    keys = _selected(args)
    exporters = args.exporters.split(",")
    start = time.perf_counter()
    for i, key in enumerate(keys):
        opinfo = db[key]
        entry = table.entry_for(key)
        for dtype in _dtypes_for(entry, opinfo, args.dtypes):
            for exporter in exporters:
                record = _run_one(key, opinfo, dtype, exporter, args)
                records[_record_id(record)] = record
                reason = f"  {record['reason'][:150]}" if record["status"] != "pass" else ""
                print(
                    f"[{i + 1}/{len(keys)} {time.perf_counter() - start:6.0f}s] {key} "
                    f"{record['dtype']} {exporter}: {record['status']}{reason}",
                    flush=True,
                )
        _save(args.json, records)
    return records


# -- the report ------------------------------------------------------------------------


def _by_op(
    records: dict[str, dict[str, Any]], dtype_mode: str
) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    db = op_db_by_key()
    order = {k: i for i, k in enumerate(db)}
    grouped: dict[tuple[str, str], dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for r in records.values():
        if r["op"] not in order:
            continue
        entry = table.entry_for(r["op"])
        primary = _dtype_name(table.primary_dtype(entry, db[r["op"]]))
        if dtype_mode == "primary" and r["dtype"] != primary:
            continue
        grouped[(r["op"], r["dtype"])][r["exporter"]] = r
    return dict(sorted(grouped.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])))


def _counts(
    grouped: dict[Any, dict[str, dict[str, Any]]], exporter: str
) -> collections.Counter[str]:
    return collections.Counter(
        ops[exporter]["status"] for ops in grouped.values() if exporter in ops
    )


def print_summary(records: dict[str, dict[str, Any]], dtype_mode: str) -> None:
    grouped = _by_op(records, dtype_mode)
    exporters = sorted({e for ops in grouped.values() for e in ops}, key=list(EXPORTERS).index)
    print(f"\n{len(grouped)} (op, dtype) pairs")
    for exporter in exporters:
        counts = _counts(grouped, exporter)
        print(f"  {exporter:11s} " + "  ".join(f"{s} {counts.get(s, 0):4d}" for s in STATUSES))
    print("\nOps where either fails:")
    for (op, dtype), ops in grouped.items():
        if all(r["status"] != "fail" for r in ops.values()):
            continue
        print(f"  {op} [{dtype}]")
        for exporter in exporters:
            r = ops.get(exporter)
            if r is not None and r["status"] != "pass":
                print(f"      {exporter}: {r['status']}: {r['reason'][:200]}")
    if "ours" in exporters and "torch.onnx" in exporters:
        lost = [
            f"{op} [{dt}]"
            for (op, dt), ops in grouped.items()
            if ops.get("torch.onnx", {}).get("status") == "pass"
            and ops.get("ours", {}).get("status") == "fail"
        ]
        print(f"\ntorch.onnx passes, ours fails ({len(lost)}): {', '.join(lost)}")
    unexpected = [
        f"{ops['ours']['op']} [{dt}] ({ops['ours']['status']})"
        for (_, dt), ops in grouped.items()
        if "ours" in ops
        and ops["ours"]["status"] != "skip"
        and ops["ours"].get("expected", ops["ours"]["status"]) != ops["ours"]["status"]
    ]
    print(f"ours differs from the table's expectation ({len(unexpected)}): {', '.join(unexpected)}")


def _cell(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    return {"pass": "pass", "fail": "**fail**", "skip": "skip"}[record["status"]]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _escape(text: str) -> str:
    return _ANSI.sub("", text).replace("|", "\\|").replace("\n", " ")[:240]


def write_markdown(
    records: dict[str, dict[str, Any]], path: Path, args: argparse.Namespace
) -> None:
    grouped = _by_op(records, "primary")
    ours, theirs = _counts(grouped, "ours"), _counts(grouped, "torch.onnx")
    lines = [
        "# Op coverage: OpInfo sweep",
        "",
        "Generated by `python bench/bench_opinfo.py` (do not edit by hand). Every entry of",
        "torch's `op_db` (torch 2.13): the first two CPU samples in the op's primary dtype",
        "(float32; int64 or complex64 for ops that have no float32 samples), each wrapped in",
        "a small module, exported, run in ONNX Runtime and compared with eager PyTorch",
        "(rtol 1e-3, atol 1e-4 unless the op test table says otherwise). Random and",
        "uninitialised outputs are compared by shape and dtype. Skips, per-op tolerances",
        "and the reasons of our expected failures live in `tests/ops/ops_test_data.py`.",
        "",
        "| exporter | pass | fail | skip |",
        "|---|---|---|---|",
        f"| onnx-export | {ours['pass']} | {ours['fail']} | {ours['skip']} |",
        f"| torch.onnx.export(dynamo=True) | {theirs['pass']} | {theirs['fail']} "
        f"| {theirs['skip']} |",
        "",
        "| op | dtype | onnx-export | torch.onnx "
        "| reason (ours; torch.onnx's when only it fails) |",
        "|---|---|---|---|---|",
    ]
    for (op, dtype), ops in grouped.items():
        mine, other = ops.get("ours"), ops.get("torch.onnx")
        reason = ""
        if mine is not None and mine["status"] != "pass":
            reason = mine["reason"]
            expectation = table.entry_for(op).expectation(getattr(torch, dtype, torch.float32))
            if expectation is not None and mine["status"] == "fail":
                reason = f"{expectation.reason} ({mine['reason']})"
        elif other is not None and other["status"] != "pass":
            reason = f"torch.onnx: {other['reason']}"
        lines.append(f"| `{op}` | {dtype} | {_cell(mine)} | {_cell(other)} | {_escape(reason)} |")
    lines += _dtype_section(records)
    lines += _zoo_section()
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


def _dtype_section(records: dict[str, dict[str, Any]]) -> list[str]:
    """Our results in every dtype of the full sweep (``--dtypes all``), when it ran."""
    everything = _by_op(records, "all")
    primary = _by_op(records, "primary")
    others = {k: v for k, v in everything.items() if k not in primary and "ours" in v}
    if not others:
        return []
    per_dtype: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for (_, dtype), ops in others.items():
        per_dtype[dtype][ops["ours"]["status"]] += 1
    lines = [
        "",
        "## Other dtypes (onnx-export)",
        "",
        "`python bench/bench_opinfo.py --exporters ours --dtypes all`: the same samples in",
        "float16, int64 and bool wherever the op supports them on CPU (beside the primary",
        "dtype above). Expected failures carry their reason in the op test table.",
        "",
        "| dtype | pass | fail | skip |",
        "|---|---|---|---|",
    ]
    for dtype, counts in sorted(per_dtype.items()):
        lines.append(f"| {dtype} | {counts['pass']} | {counts['fail']} | {counts['skip']} |")
    lines += ["", "| op | dtype | reason |", "|---|---|---|"]
    for (op, dtype), ops in others.items():
        if ops["ours"]["status"] == "fail":
            lines.append(f"| `{op}` | {dtype} | {_escape(ops['ours']['reason'])} |")
    return lines


def _zoo_cell(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    if record["status"] != "pass":
        return f"**fail** ({record['seconds']:.1f} s)"
    return (
        f"pass: {record['seconds']:.1f} s, err {record.get('max_error', 0):.1e}, "
        f"{record.get('nodes', 0)} nodes, {record.get('bytes', 0) / 1024:.0f} KiB, "
        f"{record.get('latency_ms', 0):.2f} ms"
    )


def _zoo_section() -> list[str]:
    """The model zoo table of ``bench/bench_zoo.py``'s last run, when there is one."""
    results = ROOT / "bench" / "zoo_results.json"
    if not results.exists():
        return []
    records: dict[str, dict[str, Any]] = json.loads(results.read_text())
    rows = sorted({k.rsplit("|", 1)[0] for k in records})
    passing = collections.Counter(
        k.rsplit("|", 1)[1] for k, r in records.items() if r["status"] == "pass"
    )
    lines = [
        "",
        "## Model zoo",
        "",
        "Generated by `python bench/bench_zoo.py`: small-config transformers models and",
        "torch.nn patterns (`tests/e2e/zoo_models.py`), exported with grad mode on and off,",
        "static and with dynamic dims (run again at other sizes), compared with eager in",
        "ONNX Runtime (rtol 1e-3, atol 1e-4). Each cell: status, export time (s), largest",
        "absolute difference from eager, main-graph nodes, file size (KiB) and median",
        "ONNX Runtime call (ms, each exporter's own input/output handling included).",
        "",
        f"Passing cases (of {len(rows)}): onnx-export {passing['ours']}, "
        f"torch.onnx {passing['torch.onnx']}.",
        "",
        "| model | case | onnx-export | torch.onnx | reason (ours, else torch.onnx's) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        mine, other = records.get(f"{row}|ours"), records.get(f"{row}|torch.onnx")
        failing = mine if mine and mine["status"] != "pass" else other
        reason = failing["reason"] if failing and failing["status"] != "pass" else ""
        model, case = row.split("|")
        cells = [_zoo_cell(r) for r in (mine, other)]
        lines.append(f"| {model} | {case} | {cells[0]} | {cells[1]} | {_escape(reason)} |")
    return lines


_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(")
_TYPE = re.compile(r"Type '(tensor\(\w+\))' of input parameter \(.*?\) of operator \((\w+)\)")


def _short_reason(reason: str, dtype: str) -> str:
    """A table-worthy reason from a failure message."""
    text = _ANSI.sub("", reason)
    if match := _KERNEL.search(text):
        return f"ONNX Runtime has no {dtype} kernel for {match.group(1)}"
    if match := _TYPE.search(text):
        return f"ONNX's {match.group(2)} does not take {match.group(1)}"
    if match := re.search(r"while running (\w+) node", text):
        return f"ONNX Runtime fails running {match.group(1)} in {dtype}"
    if match := re.search(r"no ONNX function: ([\w:.]+?)\.?$", text.split(" <- ")[0]):
        return f"no ONNX function for {match.group(1)} in {dtype}"
    if "expected the graph's tensor" in text:
        return f"the ONNX output's dtype differs from torch's in {dtype}"
    if "DataDependent" in text or "Unbacked" in text:
        return "torch.export cannot capture it: the output depends on the data"
    if "values differ" in text:
        return f"differs from eager in {dtype} beyond the tolerance"
    text = text.split("] ", 1)[-1]
    return (text.rsplit(" <- ", 1)[-1] if " <- " in text else text)[:80]


def print_dtype_xfails(records: dict[str, dict[str, Any]]) -> None:
    """The ``_DTYPE_XFAILS`` table of ``tests/ops/ops_test_data.py``, from the last sweep."""
    grouped = _by_op(records, "all")
    primary = _by_op(records, "primary")
    table_: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for (op, dtype), ops in grouped.items():
        ours = ops.get("ours")
        if (op, dtype) in primary or ours is None or ours["status"] != "fail":
            continue
        covered = [e for e in table.entry_for(op).expectations if not e.dtypes]
        if covered:  # already expected to fail in every dtype
            continue
        table_[op][dtype] = _short_reason(ours["reason"], dtype)
    print("_DTYPE_XFAILS: dict[str, dict[str, str]] = {")
    for op, reasons in table_.items():
        print(f"    {json.dumps(op)}: {{")
        for dtype, reason in reasons.items():
            print(f"        {json.dumps(dtype)}: {json.dumps(reason)},")
        print("    },")
    print("}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated op keys or fnmatch patterns")
    parser.add_argument("--limit", type=int, default=0, help="first N ops only")
    parser.add_argument("--exporters", default="ours,torch.onnx")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--dtypes", choices=("primary", "all"), default="primary")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per sample")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--markdown", type=Path, default=COVERAGE)
    parser.add_argument("--no-markdown", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="no sweep; report the JSON")
    parser.add_argument(
        "--print-dtype-xfails",
        action="store_true",
        help="print the op table's _DTYPE_XFAILS from the JSON (after a --dtypes all sweep)",
    )
    args = parser.parse_args()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    if args.print_dtype_xfails:
        print_dtype_xfails(_load(args.json))
        return
    records = _load(args.json) if args.report_only else sweep(args)
    print_summary(records, args.dtypes)
    if not args.no_markdown:
        write_markdown(records, args.markdown, args)


if __name__ == "__main__":
    main()
