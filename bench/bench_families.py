"""Export time on heavy model families (#39): ours against torch.onnx, stage by stage.

The stand-ins of ``bench/family_standins.py`` (a diffusers UNet and VAE decoder, SAM's
image encoder, whisper's encoder and decoder, a MONAI-style 3-D UNet, a YOLO detector
with its decode head, a graph network on ``edge_index``; plain torch, random weights, a
dynamic axis each) are exported by ours (``ExportOptions(dynamic_shapes=...)``, every
check on: parity, served axes) and by ``torch.onnx.export(..., dynamic_shapes=...,
dynamo=True)``, then saved. The two alternate within each round (``--repeat`` rounds,
the order flipped every round, medians; ``--cold``: each export in a fresh process, as a
user's script runs it, the exporter's import and first-use costs counted). Printed: ours'
stages (``stage_times``; the ``dynamic axes`` stage includes any recapture's own stages),
the totals, the ratio per model, the geomean per family and over all, and the models
above 0.7x.

    python bench/bench_families.py [--models audio/whisper_encoder] [--repeat 3]
    python bench/bench_families.py --profile audio/whisper_encoder   # cProfile of ours
    python bench/bench_families.py --cold --repeat 3   # each export in a fresh process
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import io
import json
import logging
import math
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import family_standins  # noqa: E402

STAGES = ["capture", "decomposition", "translation", "adapter", "optimizer", "folding"]
STAGES += ["opset", "dynamic axes", "verify", "edge probe", "save", "check"]


def export_ours(case: family_standins.Case, folder: Path) -> tuple[dict[str, float], int]:
    """Our export (dynamic shapes, default checks) then save; stage times and nodes."""
    import onnx_export

    model, (args, kwargs), shapes = case
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = onnx_export.dynamo_export(model, *args, export_options=options, **kwargs)
        program.save(folder / "ours.onnx")
    times = dict(program.stage_times)
    times["total"] += times.get("save", 0.0)
    return times, program.model.graph.num_nodes()


def export_theirs(case: family_standins.Case, folder: Path) -> tuple[float, int]:
    """torch.onnx's export (dynamo=True, optimized: its default) then save."""
    model, (args, kwargs), shapes = case
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, kwargs=kwargs, dynamic_shapes=shapes, dynamo=True)
        assert program is not None
        program.save(str(folder / "theirs.onnx"))
    return time.perf_counter() - start, len(program.model.graph)


def _child(who: str, name: str, threads: str) -> None:
    """One export in this fresh process (``--child``): the exporter imported, the model
    exported and saved; prints the seconds (and ours' stages) as JSON."""
    case = family_standins.build(name)
    if int(threads):
        torch.set_num_threads(int(threads))
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        start = time.perf_counter()
        if who == "ours":
            times, _ = export_ours(case, Path(tmp))
        else:
            times = {}
            export_theirs(case, Path(tmp))
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "stages": times}))


def _cold(who: str, name: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", who, name, str(torch.get_num_threads())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{who} on {name}: {(done.stderr.strip().splitlines() or [''])[-1]}")
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def measure(name: str, repeat: int, theirs: bool, cold: bool = False) -> dict[str, Any]:
    """Median stages of ours and median total of theirs, alternated (order flipped per round).

    ``cold``: each export in a fresh process (:func:`_cold`), a user's script, which imports
    the exporter and exports once; ours' time is then the import, the export and the save.
    """
    from bench_stages import medians

    case = None if cold else family_standins.build(name)
    ours: list[dict[str, float]] = []
    their_times: list[float] = []
    row: dict[str, Any] = {"nodes": 0}
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        folder = Path(tmp)
        for round_ in range(repeat):
            order = ["ours", "theirs"] if round_ % 2 == 0 else ["theirs", "ours"]
            for who in order:
                if who == "ours" and cold:
                    found = _cold("ours", name)
                    ours.append({**found["stages"], "total": found["seconds"]})
                elif who == "ours":
                    times, row["nodes"] = export_ours(copy.deepcopy(case), folder)
                    ours.append(times)
                elif theirs:
                    try:
                        if cold:
                            seconds = _cold("theirs", name)["seconds"]
                        else:
                            seconds, row["their_nodes"] = export_theirs(copy.deepcopy(case), folder)
                        their_times.append(seconds)
                    except Exception as e:
                        row["their_error"] = f"{type(e).__name__}: {str(e)[:100]}"
    return medians(row, ours, their_times)


def _line(name: str, row: dict[str, Any]) -> str:
    stages = row["stages"]
    cells = "".join(f"{stages.get(s, 0.0):7.2f}" for s in STAGES)
    total, theirs = stages["total"], row.get("theirs")
    ratio = total / theirs if theirs else math.nan
    return (
        f"{name:24s}{cells}{total:8.2f}{theirs or math.nan:8.2f}{ratio:7.2f}x"
        f"{row['nodes']:6d}{row.get('their_nodes', 0):6d}"
    )


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    """Stages, totals and ratios per model; geomeans per family and over all."""
    head = "".join(f"{s[:6]:>7s}" for s in STAGES)
    print(f"{'model':24s}{head}{'ours':>8s}{'theirs':>8s}{'ratio':>8s}{'nodes':>6s}{'th.n':>6s}")
    for name, row in rows.items():
        print(_line(name, row))
        if "their_error" in row:
            print(f"    torch.onnx: {row['their_error']}")
    ratios = {n: r["stages"]["total"] / r["theirs"] for n, r in rows.items() if r.get("theirs")}
    if not ratios:
        return
    print("\n| family | models | ours / torch.onnx (geomean) | max |")
    print("|---|---|---|---|")
    for family in sorted({n.split("/")[0] for n in ratios}):
        values = [r for n, r in ratios.items() if n.split("/")[0] == family]
        print(
            f"| {family} | {len(values)} | {statistics.geometric_mean(values):.2f}x | "
            f"{max(values):.2f}x |"
        )
    print(
        f"| all | {len(ratios)} | {statistics.geometric_mean(ratios.values()):.2f}x | "
        f"{max(ratios.values()):.2f}x |"
    )
    above = [f"{n} {r:.2f}x" for n, r in ratios.items() if r > 0.7]
    print(f"\nabove 0.7x: {', '.join(above) or 'none'}")


def profile(name: str) -> None:
    """cProfile of our export of ``name`` (after a warm-up export), by cumulative and own time."""
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        export_ours(family_standins.build(name), Path(tmp))
        profiler = cProfile.Profile()
        profiler.enable()
        times, _ = export_ours(family_standins.build(name), Path(tmp))
        profiler.disable()
    print({k: round(v, 3) for k, v in times.items()})
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(50)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: every family)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per model (median)")
    parser.add_argument("--no-theirs", action="store_true", help="ours only (no ratios)")
    parser.add_argument("--profile", help="cProfile our export of this model")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="each export in a fresh process (the exporter's import counted), as a user's script",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch's threads (1, steadier on a shared machine; 0 for torch's default, as a "
        "user's process runs, where the checks' eager runs use every core)",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("WHO", "MODEL", "THREADS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.profile:
        profile(args.profile)
        return
    names = args.models.split(",") if args.models else list(family_standins.FAMILIES)
    if not args.cold:  # warm-up of both exporters: imports, registries, decomposition tables
        measure("graph/gnn", 1, not args.no_theirs)
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            rows[name] = measure(name, args.repeat, not args.no_theirs, cold=args.cold)
        except Exception as e:
            print(f"# {name}: ours failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            continue
        print(_line(name, rows[name]), file=sys.stderr, flush=True)
    print_table(rows)


if __name__ == "__main__":
    main()
