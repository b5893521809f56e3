"""Where the export time goes: per-stage seconds of our export, beside torch.onnx's total.

For each model (the zoo of ``tests/e2e/zoo_models.py``: transformers tiny configs and
torch.nn patterns; and the vision stand-ins of ``bench/vision_standins.py`` for the
torchvision/timm outliers) it exports with ours and with ``torch.onnx.export(dynamo=True)``
in alternation (``--repeat`` rounds, median), then prints ours' stages
(``ONNXProgram.stage_times``: capture, decomposition, translation, report, adapter,
optimizer, folding, opset, ort_target, save), the export time ratio ours / torch.onnx, the
node counts and ratio, and our export time per node (linear growth shows as a flat
column). The slowest models (by ratio) are listed last with their stages. Absolute
seconds on a shared machine are noise; the ratios come from the same run.

    python bench/bench_stages.py [--models nf_resnet,bert] [--repeat 3] [--no-theirs]
    python bench/bench_stages.py --set vision        # zoo | vision | all (default)
    python bench/bench_stages.py --profile swin_window  # cProfile of our export, top 30
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import io
import logging
import math
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import vision_standins  # noqa: E402

from tests.e2e.zoo_models import ZOO  # noqa: E402

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
STAGES = ["capture", "decomposition", "translation", "report", "adapter", "optimizer"]
STAGES += ["folding", "opset", "ort_target", "verify", "save", "check"]


def models(which: str) -> dict[str, Callable[[], tuple[nn.Module, Inputs]]]:
    """The benchmark's models by name: ``zoo``, ``vision`` or ``all``."""
    found: dict[str, Callable[[], tuple[nn.Module, Inputs]]] = {}
    if which in ("zoo", "all"):
        for name, entry in ZOO.items():
            found[name] = lambda entry=entry: (entry.build(), entry.inputs(*entry.size))
    if which in ("vision", "all"):
        for name in vision_standins.STANDINS:
            found[name] = lambda name=name: vision_standins.build(name)
    return found


def export_ours(model: nn.Module, inputs: Inputs, folder: Path) -> tuple[dict[str, float], int]:
    """Our export then save; the stage times and the node count."""
    import onnx_export

    program = onnx_export.dynamo_export(model, *inputs[0], **inputs[1])
    program.save(folder / "ours.onnx")
    return dict(program.stage_times), program.model.graph.num_nodes()


def export_theirs(model: nn.Module, inputs: Inputs, folder: Path) -> tuple[float, int]:
    """torch.onnx's export (optimized, its default) then save; seconds and nodes."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs[0], kwargs=inputs[1], dynamo=True)
        assert program is not None
        program.save(str(folder / "theirs.onnx"))
    return time.perf_counter() - start, len(program.model.graph)


def measure(
    make: Callable[[], tuple[nn.Module, Inputs]], repeat: int, theirs: bool
) -> dict[str, Any]:
    """Median stage times of ours and the median total of theirs, alternated per round."""
    model, inputs = make()
    ours: list[dict[str, float]] = []
    their_times: list[float] = []
    row: dict[str, Any] = {"group": _group(model)}
    with tempfile.TemporaryDirectory() as name, torch.no_grad():
        folder = Path(name)
        for _ in range(repeat):
            times, row["nodes"] = export_ours(copy.deepcopy(model), copy.deepcopy(inputs), folder)
            times["total"] += times.get("save", 0.0)
            ours.append(times)
            if theirs:
                try:
                    seconds, row["their_nodes"] = export_theirs(
                        copy.deepcopy(model), copy.deepcopy(inputs), folder
                    )
                    their_times.append(seconds)
                except Exception as e:
                    row["their_error"] = f"{type(e).__name__}: {str(e)[:100]}"
    return medians(row, ours, their_times)


def medians(
    row: dict[str, Any], ours: list[dict[str, float]], their_times: list[float]
) -> dict[str, Any]:
    """``row`` with each of our stages' median time, and torch.onnx's median when it ran."""
    keys = {k for t in ours for k in t}
    row["stages"] = {k: statistics.median(t.get(k, 0.0) for t in ours) for k in keys}
    if their_times:
        row["theirs"] = statistics.median(their_times)
    return row


def _group(model: nn.Module) -> str:
    """``transformers``, ``vision`` (the stand-ins) or ``torch.nn`` (the other zoo models)."""
    modules = {type(m).__module__.split(".")[0] for m in model.modules()}
    if "transformers" in modules:
        return "transformers"
    return "vision" if vision_standins.__name__ in modules else "torch.nn"


def _geomeans(ratios: dict[str, float], rows: dict[str, dict[str, Any]]) -> str:
    """Per group: the geomean and max of ``ratios`` and the number of models."""
    parts = []
    for group in ("transformers", "vision", "torch.nn"):
        values = [r for n, r in ratios.items() if rows[n]["group"] == group]
        if values:
            parts.append(
                f"{group} {statistics.geometric_mean(values):.2f}x "
                f"(max {max(values):.2f}x, {len(values)} models)"
            )
    return "; ".join(parts)


def _line(name: str, row: dict[str, Any]) -> str:
    stages = row["stages"]
    cells = "".join(f"{stages.get(s, 0.0):7.3f}" for s in STAGES)
    total = stages["total"]
    theirs = row.get("theirs")
    ratio = total / theirs if theirs else math.nan
    nodes, their_nodes = row["nodes"], row.get("their_nodes")
    node_ratio = nodes / their_nodes if their_nodes else math.nan
    per_node = 1e3 * total / max(nodes, 1)
    return (
        f"{name:22s}{cells}{total:8.3f}{theirs or math.nan:8.3f}{ratio:7.2f}x"
        f"{nodes:6d}{their_nodes or 0:6d}{node_ratio:6.2f}x{per_node:8.2f}"
    )


def print_parity_cost(rows: dict[str, dict[str, Any]]) -> None:
    """What the default parity check (``verify``) and save's graph check (``check``) cost.

    Against torch.onnx's export time: which models are slower than torch.onnx, and which of
    them only because of the parity check.
    """
    verify = {n: r["stages"].get("verify", 0.0) for n, r in rows.items()}
    check = {n: r["stages"].get("check", 0.0) for n, r in rows.items()}
    share = {n: verify[n] / r["theirs"] for n, r in rows.items()}
    top = max(share, key=share.__getitem__)
    slower = [n for n, r in rows.items() if r["stages"]["total"] > r["theirs"]]
    pushed = [n for n in slower if rows[n]["stages"]["total"] - verify[n] <= rows[n]["theirs"]]
    print(
        f"parity check (verify): median {statistics.median(verify.values()):.3f} s, max "
        f"{max(verify.values()):.3f} s ({max(verify, key=verify.__getitem__)}); as a share of "
        f"torch.onnx's time: median {statistics.median(share.values()):.1%}, max "
        f"{share[top]:.1%} ({top}); save's graph check: median "
        f"{statistics.median(check.values()):.3f} s, max {max(check.values()):.3f} s"
    )
    print(
        f"slower than torch.onnx: {', '.join(slower) or 'none'}; of them only because of the "
        f"parity check: {', '.join(pushed) or 'none'}"
    )


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    """The table, geomeans of the ratios and the five slowest models by ratio."""
    head = "".join(f"{s[:6]:>7s}" for s in STAGES)
    print(f"{'model':22s}{head}{'ours':>8s}{'theirs':>8s}{'ratio':>8s}"
          f"{'nodes':>6s}{'th.n':>6s}{'n.rat':>7s}{'ms/node':>8s}")  # fmt: skip
    for name, row in rows.items():
        print(_line(name, row))
        if "their_error" in row:
            print(f"    torch.onnx: {row['their_error']}")
    both = {n: r for n, r in rows.items() if r.get("theirs") and r.get("their_nodes")}
    if not both:
        return
    time_ratios = {n: r["stages"]["total"] / r["theirs"] for n, r in both.items()}
    node_ratios = {n: r["nodes"] / r["their_nodes"] for n, r in both.items()}
    print(
        f"\ngeomean ours / torch.onnx over {len(both)} models: export time "
        f"{statistics.geometric_mean(time_ratios.values()):.2f}x (max "
        f"{max(time_ratios.values()):.2f}x), nodes "
        f"{statistics.geometric_mean(node_ratios.values()):.2f}x "
        f"(max {max(node_ratios.values()):.2f}x)"
    )
    print(f"export time by group: {_geomeans(time_ratios, rows)}")
    print_parity_cost(both)
    print(f"nodes by group: {_geomeans(node_ratios, rows)}")
    worst = sorted(time_ratios, key=time_ratios.__getitem__, reverse=True)[:5]
    print("slowest by time ratio: " + ", ".join(f"{n} {time_ratios[n]:.2f}x" for n in worst))
    larger = sorted(
        (n for n in node_ratios if node_ratios[n] > 1.0), key=node_ratios.get, reverse=True
    )  # type: ignore[arg-type]
    print("larger graphs: " + (", ".join(f"{n} {node_ratios[n]:.2f}x" for n in larger) or "none"))


def profile(make: Callable[[], tuple[nn.Module, Inputs]]) -> None:
    """cProfile of one of our exports (after a warm-up one), top 30 by cumulative time."""
    import onnx_export

    model, inputs = make()
    with torch.no_grad():
        onnx_export.dynamo_export(copy.deepcopy(model), *inputs[0], **inputs[1])
        profiler = cProfile.Profile()
        profiler.enable()
        onnx_export.dynamo_export(model, *inputs[0], **inputs[1])
        profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="all", choices=["zoo", "vision", "all"])
    parser.add_argument("--models", help="comma-separated names (default: the whole set)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per model (median)")
    parser.add_argument("--no-theirs", action="store_true", help="ours only (no ratios)")
    parser.add_argument("--profile", help="cProfile our export of this model")
    args = parser.parse_args()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    found = models("all" if args.models or args.profile else args.set)
    if args.profile:
        profile(found[args.profile])
        return
    names = args.models.split(",") if args.models else list(found)
    every = models("all")
    # Warm-up of both exporters, so neither pays a first-use cost in the table: imports,
    # registries, torch's decomposition tables (nf_resnet, buffer_update), transformers (bert).
    for warm in ("resnet_d", "nf_resnet", "buffer_update", "bert"):
        measure(every[warm], 1, not args.no_theirs)
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            rows[name] = measure(found[name], args.repeat, not args.no_theirs)
        except Exception as e:
            print(f"# {name}: ours failed: {type(e).__name__}: {str(e)[:150]}", file=sys.stderr)
            continue
        print(_line(name, rows[name]), file=sys.stderr, flush=True)
    print_table(rows)
    slow = sorted(rows, key=lambda n: rows[n]["stages"]["total"] / rows[n].get("theirs", math.inf),
                  reverse=True)[:5]  # fmt: skip
    print("\nstages of the five slowest (by ratio), seconds:")
    for name in slow:
        stages = rows[name]["stages"]
        text = ", ".join(f"{s} {stages[s]:.3f}" for s in [*STAGES, "total"] if s in stages)
        print(f"  {name}: {text}")


if __name__ == "__main__":
    main()
