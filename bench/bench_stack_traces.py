"""Capture time with torch's stack-trace recorder and with ours (#39, seventh round).

Non-strict capture records a stack trace for every node. torch builds a summary of every
frame of the stack (export's own frames included, some 60 deep) and then drops most; the
``stack_traces`` capture patch walks the interpreter's frames, drops torch's uninteresting
files before any line is read and formats each frame once per capture. This bench captures
each family stand-in both ways, alternated in one process (after a warm-up), and checks
that each node's text is a prefix of torch's (torch's goes on into the tracer's frames).

    python bench/bench_stack_traces.py --repeat 3
    python bench/bench_stack_traces.py --models graph/gnn,diffusion/unet2d_cond
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import family_standins
import torch

import onnx_export
import onnx_export.capture._strategies as strategies
from onnx_export.capture._call import capture_call, forward_signature, prepare_call
from onnx_export.capture.patches._registry import swapped
from tests.capture_patches import patches_with_torchs_stack_traces


def _capture(name: str, torchs: bool) -> tuple[float, dict[str, str]]:
    model, (args, kwargs), shapes = family_standins.build(name)
    options = onnx_export.ExportOptions(dynamic_shapes=shapes)
    call = prepare_call(model, forward_signature(model), args, kwargs, options)
    with swapped(
        (
            strategies,
            "PATCHES",
            patches_with_torchs_stack_traces() if torchs else strategies.PATCHES,
        )
    ):
        start = time.perf_counter()
        program, _ = capture_call(call, options)
        seconds = time.perf_counter() - start
    assert program is not None, name
    return seconds, {n.name: n.meta.get("stack_trace") or "" for n in program.graph.nodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: every family)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per model (minimum)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    names = args.models.split(",") if args.models else list(family_standins.FAMILIES)
    print(f"{'model':32} {'torch (s)':>10} {'ours (s)':>10} {'ratio':>7}  text")
    for name in names:
        _capture(name, True), _capture(name, False)  # warm-up
        theirs, ours = [], []
        for _ in range(args.repeat):
            seconds, torchs = _capture(name, True)
            theirs.append(seconds)
            seconds, texts = _capture(name, False)
            ours.append(seconds)
        same = all(torchs[k].startswith(texts.get(k, "")) for k in torchs)
        ratio = min(ours) / min(theirs)
        verdict = "a prefix of torch's" if same else "DIFFERS"
        print(f"{name:32} {min(theirs):10.3f} {min(ours):10.3f} {ratio:6.2f}x  {verdict}")


if __name__ == "__main__":
    main()
