"""Side by side with torch.onnx: higher-order ops, symbolic scalars, complex constants,
opset-23 ``Attention``/``RMSNormalization`` and ``linspace`` (issue 12, items 1-3, 8, 9).

Each case is a model of the tests (``tests/onnx_export/test_control_flow.py``,
``test_symbolic.py``, ``test_op_gaps.py``), exported by both exporters in this process:
``ok`` when the export works and ONNX Runtime matches eager PyTorch (max abs difference
printed; dynamic cases are run at a second size too), ``FAIL`` (with the first line of the
error) otherwise. For the opset-23 cases the table says whether the graph has ONNX's own
``Attention``/``RMSNormalization`` node.

Usage: ``python bench/bench_capture_cases.py [case-substring ...]``
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

import onnx_export

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.onnx_export import test_control_flow as control_flow  # noqa: E402
from tests.onnx_export import test_op_gaps as op_gaps  # noqa: E402
from tests.onnx_export import test_symbolic as symbolic  # noqa: E402

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)  # torch.onnx's registry and the optimizer's notes


class Case:
    """One model with its inputs at two sizes (the second for dynamic cases)."""

    def __init__(
        self,
        name: str,
        model: Callable[[], nn.Module],
        inputs: Callable[[], tuple[Any, ...]],
        *,
        second: Callable[[], tuple[Any, ...]] | None = None,
        dynamic: dict[str, Any] | None = None,
        opset: int = 18,
        strict: bool = False,
        fused: str = "",
    ) -> None:
        self.name, self.model, self.inputs, self.second = name, model, inputs, second
        self.dynamic, self.opset, self.strict, self.fused = dynamic, opset, strict, fused


def _cases() -> list[Case]:
    cases: list[Case] = []
    for name, cf in control_flow.CASES.items():
        for dynamic in (False, True):
            cases.append(
                Case(
                    f"{name}{'/dynamic' if dynamic else ''}",
                    cf.model,
                    lambda cf=cf: cf.inputs(3),
                    second=(lambda cf=cf: cf.inputs(6)) if dynamic else None,
                    dynamic=cf.dynamic if dynamic else None,
                    strict=cf.strict,
                )
            )
    for name, (fn, _) in symbolic.CASES.items():
        cases.append(
            Case(
                f"sym/{name}",
                lambda fn=fn: symbolic.Fn(fn),
                lambda: symbolic._inputs(7, 5),
                second=lambda: symbolic._inputs(12, 17),
                dynamic=symbolic._DYNAMIC,
            )
        )
    cases.append(
        Case(
            "sym/scalar_outputs",
            lambda: symbolic.Fn(symbolic._scalar_outputs),
            lambda: symbolic._inputs(7, 5),
            second=lambda: symbolic._inputs(4, 6),
            dynamic=symbolic._DYNAMIC,
        )
    )
    for name, fn in op_gaps.COMPLEX.items():
        cases.append(
            Case(f"complex/{name}", lambda fn=fn: op_gaps.Fn(fn), lambda: (torch.randn(3, 2),))
        )
    for name, (kwargs, inputs) in op_gaps.ATTENTION.items():
        cases.append(
            Case(
                f"opset23/sdpa_{name}",
                lambda kwargs=kwargs: op_gaps.Attention(**kwargs),
                inputs,
                opset=23,
                fused="Attention",
            )
        )
    for affine in (True, False):
        cases.append(
            Case(
                f"opset23/rms_norm{'' if affine else '_no_weight'}",
                lambda affine=affine: nn.RMSNorm(8, elementwise_affine=affine, eps=1e-5),
                lambda: (torch.randn(2, 3, 8),),
                second=lambda: (torch.randn(5, 3, 8),),
                dynamic={"x": {0: "b"}},
                opset=23,
                fused="RMSNormalization",
            )
        )
    cases.append(Case("linspace", op_gaps.Linspaces, lambda: (torch.rand(4, 9),)))
    return cases


# -- running each exporter --------------------------------------------------------------


def _ours(case: Case, model: nn.Module) -> tuple[float, set[str]]:
    options = onnx_export.ExportOptions(
        dynamic_shapes=case.dynamic,
        opset_version=case.opset,
        capture_strategies=("strict",) if case.strict else ("non_strict", "strict"),
    )
    program = onnx_export.dynamo_export(model, *case.inputs(), export_options=options)
    return _check(program, model, case), {n.op_type for n in program.model.graph}


def _torch_dims(dynamic: dict[str, Any] | None) -> Any:
    if dynamic is None:
        return None
    return {
        name: None if axes is None else dict.fromkeys(axes, torch.export.Dim.DYNAMIC)
        for name, axes in dynamic.items()
    }


def _leaves(value: Any) -> list[torch.Tensor]:
    leaves = []
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            leaves.append(torch.view_as_real(leaf) if leaf.is_complex() else leaf)
        elif isinstance(leaf, (bool, int, float)):
            leaves.append(torch.tensor(leaf))
    return leaves


def _compare(outputs: Sequence[Any], want: list[torch.Tensor]) -> float:
    got = _leaves(list(outputs))
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, eager has {len(want)}")
    worst = 0.0
    for raw, w in zip(got, want, strict=True):
        g = raw.reshape(w.shape) if raw.numel() == w.numel() else raw
        if g.shape != w.shape:
            raise AssertionError(f"shape {tuple(g.shape)} != {tuple(w.shape)}")
        diff = (g.double() - w.double()).abs()
        err = float(diff.nan_to_num(0.0).max()) if diff.numel() else 0.0
        if not torch.allclose(g.double(), w.double(), rtol=1e-4, atol=1e-5, equal_nan=True):
            raise AssertionError(f"values differ (max abs {err:.3g})")
        worst = max(worst, err)
    return worst


def _theirs(case: Case, model: nn.Module) -> tuple[float, set[str]]:
    target: Any = model
    if case.strict:  # torch.onnx captures non-strict; it takes a strict capture as a program
        target = torch.export.export(
            model, case.inputs(), dynamic_shapes=_torch_dims(case.dynamic), strict=True
        )
    program = torch.onnx.export(
        target,
        case.inputs(),
        dynamo=True,
        dynamic_shapes=_torch_dims(case.dynamic),
        opset_version=case.opset,
        verbose=False,
    )
    return _check(program, model, case), {n.op_type for n in program.model.graph}


def _check(program: Any, model: nn.Module, case: Case) -> float:
    """The same comparison for both: every output leaf (Python numbers as 0-d tensors)."""
    worst = 0.0
    for make in [case.inputs] + ([case.second] if case.second else []):
        args = make()
        with torch.no_grad():
            want = _leaves(model(*args))
        worst = max(worst, _compare(_leaves(program(*args)), want))
    return worst


def _run(
    exporter: Callable[[Case, nn.Module], tuple[float, set[str]]], case: Case
) -> tuple[str, str, float]:
    torch.manual_seed(0)
    model = case.model().eval()
    start = time.perf_counter()
    try:
        diff, ops = exporter(case, model)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        return f"FAIL {type(e).__name__}: {first[:70]}", "", time.perf_counter() - start
    fused = ("yes" if case.fused in ops else "no") if case.fused else ""
    return f"ok {diff:.1e}", fused, time.perf_counter() - start


def main(argv: Sequence[str]) -> None:
    """Run the cases (those whose name contains one of ``argv``, or all) and print the table.

    Ours runs first on every case, then torch.onnx: after some of torch.onnx's failed
    exports (``map``), a later dynamic capture in the same process comes out static.
    """
    cases = [c for c in _cases() if not argv or any(a in c.name for a in argv)]
    results = {
        label: [_run(exporter, case) for case in cases]
        for label, exporter in (("ours", _ours), ("theirs", _theirs))
    }
    print(f"{'case':34} {'ours':26} {'fused':5} {'torch.onnx':26} {'fused':5}")
    for i, case in enumerate(cases):
        (ours, ours_fused, _), (theirs, theirs_fused, _) = results["ours"][i], results["theirs"][i]
        print(f"{case.name:34} {ours:26.26} {ours_fused:5} {theirs:26.26} {theirs_fused:5}")
        for label, text in (("ours", ours), ("torch.onnx", theirs)):
            if text.startswith("FAIL") and len(text) > 26:
                print(f"    {label}: {text}")
    passed = {k: sum(r[0].startswith("ok") for r in v) for k, v in results.items()}
    seconds = {k: sum(r[2] for r in v) for k, v in results.items()}
    print(
        f"\npassed: ours {passed['ours']}/{len(cases)}, torch.onnx {passed['theirs']}/{len(cases)}"
        f"; total time ours {seconds['ours']:.1f} s, torch.onnx {seconds['theirs']:.1f} s "
        f"(ratio {seconds['ours'] / max(seconds['theirs'], 1e-9):.2f})"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
