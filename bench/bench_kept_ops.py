"""Export time where torch.export keeps ops whole that once had no ONNX function (#39).

torch.export keeps some composite ops whole (``conv2d.padding`` for ``padding="same"``,
``cosine_similarity``, ``var_mean.dim``, ``reshape_as``, ``meshgrid``, ``index_add``,
``conv_transpose3d.input``...). Without an ONNX function each such node was decomposed at
every export: traced again alone, or, at dynamic shapes for some of them, by re-tracing
the whole program (``ExportedProgram.run_decompositions``, as torch.onnx always does).
Those ops now have their own functions; this bench exports a small model of each kind,
ours (every check on) against ``torch.onnx.export(..., dynamo=True)``, alternating in one
process (order flipped every round, medians), and prints our ``decomposition`` stage.

    python bench/bench_kept_ops.py [--repeat 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class SameConvNet(nn.Module):
    """ConvMixer-like: depthwise ``padding="same"`` convolutions (``conv2d.padding``)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 4, 4)
        self.depth = nn.ModuleList(
            nn.Conv2d(32, 32, 7, groups=32, padding="same") for _ in range(8)
        )
        self.point = nn.ModuleList(nn.Conv2d(32, 32, 1) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.stem(x))
        for depth, point in zip(self.depth, self.point, strict=True):
            x = F.gelu(point(F.gelu(depth(x)) + x))
        return x.mean((2, 3))


class CosineHead(nn.Module):
    """CLIP-style: two towers, every pair scored by ``cosine_similarity``."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
        self.right = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cosine_similarity(self.left(x)[:, None], self.right(y)[None], dim=-1)


class StandardisedConvNet(nn.Module):
    """resnetv2-style weight standardisation: ``var_mean.dim`` and ``reshape_as`` per conv."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(16 if i else 3, 16, 3, padding=1) for i in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            var, mean = torch.var_mean(conv.weight, dim=[1, 2, 3], keepdim=True, unbiased=False)
            weight = ((conv.weight - mean) / torch.sqrt(var + 1e-5)).reshape_as(conv.weight)
            x = F.relu(F.conv2d(x, weight, conv.bias, padding=1))
        return x.mean((2, 3))


class Anchors(nn.Module):
    """A detector head's anchors: ``meshgrid`` of the feature map's dynamic sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(*[nn.Conv2d(8 if i else 3, 8, 3, padding=1) for i in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.conv(x)
        h, w = f.shape[2], f.shape[3]
        yy, xx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        grid = torch.stack((xx, yy), -1).view(-1, 2)
        return f.flatten(2).transpose(1, 2)[..., :2] + grid


class MessageSum(nn.Module):
    """A graph layer: messages summed onto nodes with ``index_add`` (dynamic nodes, edges)."""

    def __init__(self) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        for lin in self.lins:
            messages = lin(x)[edges[0]]
            x = torch.relu(torch.zeros_like(x).index_add(0, edges[1], messages) + x)
        return x


#: name -> (model, args, dynamic_shapes)
CASES: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...], Any]]] = {
    "conv2d.padding (same), dynamic batch": lambda: (
        SameConvNet(),
        (torch.randn(2, 3, 64, 64),),
        {"x": {0: "batch"}},
    ),
    "cosine_similarity, dynamic batches": lambda: (
        CosineHead(),
        (torch.randn(3, 64), torch.randn(4, 64)),
        {"x": {0: "n"}, "y": {0: "m"}},
    ),
    "var_mean.dim + reshape_as, dynamic batch": lambda: (
        StandardisedConvNet(),
        (torch.randn(2, 3, 32, 32),),
        {"x": {0: "batch"}},
    ),
    "meshgrid, dynamic h/w": lambda: (
        Anchors(),
        (torch.randn(1, 3, 12, 16),),
        {"x": {2: "h", 3: "w"}},
    ),
    "index_add, dynamic nodes/edges": lambda: (
        MessageSum(),
        (torch.randn(20, 16), torch.randint(0, 20, (2, 60))),
        {"x": {0: "nodes"}, "edges": {1: "edges"}},
    ),
}


def _ours(
    model: nn.Module, args: tuple[Any, ...], shapes: Any, folder: Path
) -> tuple[float, float]:
    import onnx_export

    start = time.perf_counter()
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    program = onnx_export.dynamo_export(model, *args, export_options=options)
    program.save(folder / "ours.onnx")
    return time.perf_counter() - start, program.stage_times.get("decomposition", 0.0)


def _theirs(model: nn.Module, args: tuple[Any, ...], shapes: Any, folder: Path) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        program = torch.onnx.export(model, args, dynamic_shapes=shapes, dynamo=True)
        assert program is not None
        program.save(str(folder / "theirs.onnx"))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch's threads (0: default)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    if args.threads:
        torch.set_num_threads(args.threads)
    print("| model | ours s | decomposition s | torch.onnx s | ours / torch.onnx |")
    print("|---|---|---|---|---|")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in CASES.items():
            torch.manual_seed(0)
            model, inputs, shapes = build()
            model.eval()
            _ours(model, inputs, shapes, Path(tmp))  # first use of each path, not timed
            ours, decomposition, theirs = [], [], []
            for round_ in range(args.repeat):
                for who in ("ours", "theirs") if round_ % 2 == 0 else ("theirs", "ours"):
                    if who == "ours":
                        seconds, stage = _ours(model, inputs, shapes, Path(tmp))
                        ours.append(seconds)
                        decomposition.append(stage)
                    else:
                        theirs.append(_theirs(model, inputs, shapes, Path(tmp)))
            ratio = statistics.median(ours) / statistics.median(theirs)
            ratios.append(ratio)
            print(
                f"| {name} | {statistics.median(ours):.3f} | {statistics.median(decomposition):.3f}"
                f" | {statistics.median(theirs):.3f} | {ratio:.2f}x |"
            )
    geomean = statistics.geometric_mean(ratios)
    print(f"\ngeomean ours / torch.onnx: {geomean:.2f}x (max {max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
