"""Side by side with torch.onnx: capture cases, dynamic shapes, caches, torch.onnx's options.

For each case both exporters run in the same process on the same model: ``ok`` when the
export works and ONNX Runtime matches eager PyTorch (max abs difference printed, at a
second input size where the case is dynamic), ``refused`` when the exporter raises a clear
error for a call that is wrong (the expected outcome there), ``FAIL`` otherwise.

Usage: ``python bench/bench_capture_options.py [case ...]``
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.export import Dim
from torch.utils import _pytree as pytree

import onnx_export

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.zoo_models import small_config

warnings.filterwarnings("ignore")


class TwoInputs(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask


class Add(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class Features(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features)


class WithList(nn.Module):
    def forward(self, x: torch.Tensor, extras: list[torch.Tensor]) -> torch.Tensor:
        return x + extras[0]


class Past(nn.Module):
    def forward(self, x: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        return torch.cat([kwargs["past_key_values"], x], dim=1)


def _llama() -> nn.Module:
    import transformers

    return transformers.LlamaForCausalLM(small_config("llama")).eval()


def _t5() -> nn.Module:
    import transformers

    return transformers.T5ForConditionalGeneration(small_config("t5")).eval()


def _ids(b: int, s: int) -> dict[str, Any]:
    return {"input_ids": torch.randint(0, 100, (b, s))}


def _seq2seq(b: int, s: int) -> dict[str, Any]:
    return {
        "input_ids": torch.randint(0, 100, (b, s)),
        "decoder_input_ids": torch.randint(0, 100, (b, s - 1)),
    }


# name: (model factory, call(size) -> (args, kwargs), size at export, size to check,
#        ours' options, torch.onnx's keyword arguments, whether a clear error is expected)
Case = tuple[
    Callable[[], nn.Module],
    Callable[[int], tuple[tuple[Any, ...], dict[str, Any]]],
    int,
    int,
    dict[str, Any],
    dict[str, Any],
    bool,
]


def _pair(*shape: int) -> Callable[[int], tuple[tuple[Any, ...], dict[str, Any]]]:
    return lambda n: ((torch.randn(n, *shape), torch.randn(n, *shape)), {})


CASES: dict[str, Case] = {
    "size1_dynamic_conv1d": (
        lambda: nn.Conv1d(2, 3, 3),
        lambda n: ((torch.randn(n, 2, 10),), {}),
        1,
        4,
        {"dynamic_shapes": {"input": {0: "batch"}}},
        {"dynamic_shapes": {"input": {0: Dim.DYNAMIC}}},
        False,
    ),
    "dim_tied_to_static_input": (
        TwoInputs,
        lambda n: ((torch.randn(n, 3), torch.randn(2, 3)), {}),
        2,
        2,
        {"dynamic_shapes": {"x": {0: "batch"}}},
        {"dynamic_shapes": {"x": {0: Dim.DYNAMIC}, "mask": None}},
        False,
    ),
    "dims_tied_by_model": (
        Add,
        _pair(3),
        2,
        5,
        {"dynamic_shapes": {"x": {0: Dim("a")}, "y": {0: Dim("b")}}},
        {"dynamic_shapes": {"x": {0: Dim("a")}, "y": {0: Dim("b")}}},
        False,
    ),
    "dim_specialised_by_layer": (
        Features,
        lambda n: ((torch.randn(n, 8),), {}),
        2,
        5,
        {"dynamic_shapes": {"features": {0: "batch", 1: "feat"}}},
        {"dynamic_shapes": {"features": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}},
        False,
    ),
    "axis_out_of_range": (
        Add,
        _pair(3),
        2,
        2,
        {"dynamic_shapes": {"x": {5: "batch"}, "y": None}},
        {"dynamic_shapes": {"x": {5: Dim.DYNAMIC}, "y": None}},
        True,
    ),
    "empty_dim_name": (
        Add,
        _pair(3),
        2,
        2,
        {"dynamic_shapes": {"x": {0: ""}, "y": None}},
        {"dynamic_axes": {"x": {0: ""}}, "input_names": ["x", "y"]},
        True,
    ),
    "simple_form_with_list_input": (
        WithList,
        lambda n: ((torch.randn(n, 3), [torch.randn(3)]), {}),
        2,
        4,
        {"dynamic_shapes": {"x": {0: "batch"}}},
        {"dynamic_shapes": {"x": {0: Dim.DYNAMIC}, "extras": [None]}},
        False,
    ),
    "dynamic_kwargs_entry": (
        Past,
        lambda n: ((torch.randn(n, 3),), {"past_key_values": torch.randn(n, 4)}),
        2,
        3,
        {"dynamic_shapes": {"x": {0: "batch"}, "past_key_values": {0: "batch"}}},
        {
            "dynamic_shapes": {
                "x": {0: Dim("batch")},
                "kwargs": {"past_key_values": {0: Dim("batch")}},
            }
        },
        False,
    ),
    "llama_causal_lm_cache_out": (_llama, lambda n: ((), _ids(n, 6)), 2, 2, {}, {}, False),
    "llama_cache_out_dynamic": (
        _llama,
        lambda n: ((), _ids(n, n + 3)),
        2,
        3,
        {"dynamic_shapes": {"input_ids": {0: "batch", 1: "seq"}}},
        {"dynamic_shapes": {"input_ids": {0: Dim("batch"), 1: Dim("seq")}}},
        False,
    ),
    "t5_encoder_decoder_cache_out": (_t5, lambda n: ((), _seq2seq(n, 6)), 2, 2, {}, {}, False),
    "input_output_names": (
        TwoInputs,
        _pair(3),
        2,
        2,
        {"input_names": ["a", "b"], "output_names": ["out"]},
        {"input_names": ["a", "b"], "output_names": ["out"]},
        False,
    ),
    "dynamic_axes_legacy": (
        TwoInputs,
        _pair(3),
        2,
        5,
        {"input_names": ["a", "b"], "dynamic_axes": {"a": {0: "n"}, "b": {0: "n"}}},
        {"input_names": ["a", "b"], "dynamic_axes": {"a": {0: "n"}, "b": {0: "n"}}},
        False,
    ),
    "opset_16": (
        lambda: nn.Sequential(nn.Linear(4, 3), nn.ReLU()),
        lambda n: ((torch.randn(n, 4),), {}),
        2,
        2,
        {"opset_version": 16},
        {"opset_version": 16},
        False,
    ),
    "opset_17": (
        lambda: nn.Sequential(nn.Linear(4, 3), nn.Softmax(-1)),
        lambda n: ((torch.randn(n, 4),), {}),
        2,
        2,
        {"opset_version": 17},
        {"opset_version": 17},
        False,
    ),
}


def _reason(error: BaseException) -> str:
    """The line of an error that says what went wrong (torch.onnx's cause, ANSI-free)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    cause = [line for line in lines if line.startswith("<class '")]
    text = cause[0] if cause else next((line for line in lines if line), "")
    return f"{type(error).__name__}: {text[:70]}"


def _leaves(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _diff(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, eager has {len(want)}")
    return max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want, strict=True))


def _ours(model: nn.Module, args: Any, kwargs: Any, options: dict[str, Any]) -> Callable[..., Any]:
    program = onnx_export.dynamo_export(
        model, *args, export_options=onnx_export.ExportOptions(**options), **kwargs
    )
    return lambda *a, **k: _leaves(program(*a, **k))


def _theirs(
    model: nn.Module, args: Any, kwargs: Any, options: dict[str, Any]
) -> Callable[..., Any]:
    program = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, verbose=False, **options)
    assert program is not None
    return lambda *a, **k: [torch.as_tensor(o) for o in program(*a, **k)]


def _run(name: str, side: str, case: Case) -> str:
    make, call, size, other, ours, theirs, refusal = case
    torch.manual_seed(0)
    model = make().eval()
    args, kwargs = call(size)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            run = (_ours if side == "ours" else _theirs)(
                model, args, kwargs, ours if side == "ours" else theirs
            )
    except Exception as e:
        kind = "refused" if refusal else "FAIL"
        return f"{kind} ({_reason(e)})"
    seconds = time.perf_counter() - start
    if refusal:
        return f"FAIL (exported a wrong call silently, {seconds:.1f} s)"
    args, kwargs = call(other)
    try:
        with torch.no_grad():
            want = _leaves(model(*args, **kwargs))
        diff = _diff(run(*args, **kwargs), want)
    except Exception as e:
        return f"FAIL at run ({_reason(e)})"
    verdict = "ok" if diff < 1e-3 else "MISMATCH"
    return f"{verdict} ({diff:.1e}, {seconds:.1f} s)"


def _program_call(side: str) -> str:
    """``exported_program.module()`` called as the model is (positional input)."""
    model, x = nn.Sequential(nn.Linear(4, 3)).eval(), torch.randn(2, 4)
    try:
        if side == "ours":
            exported = onnx_export.dynamo_export(model, x).exported_program
        else:
            exported = torch.onnx.export(model, (x,), dynamo=True, verbose=False).exported_program
        assert exported is not None
        diff = _diff(_leaves(exported.module()(x)), _leaves(model(x)))
    except Exception as e:
        return f"FAIL ({_reason(e)})"
    return f"ok ({diff:.1e})"


def _program_as_model(side: str) -> str:
    """An ``ExportedProgram`` passed in place of the model."""
    model, x = TwoInputs(), torch.randn(2, 3)
    exported = torch.export.export(model, (x, x))
    try:
        if side == "ours":
            outputs = _leaves(onnx_export.dynamo_export(exported, x, x)(x, x))
        else:
            program = torch.onnx.export(exported, (x, x), dynamo=True, verbose=False)
            assert program is not None
            outputs = [torch.as_tensor(o) for o in program(x, x)]
        diff = _diff(outputs, [x * x])
    except Exception as e:
        return f"FAIL ({_reason(e)})"
    return f"ok ({diff:.1e})"


EXTRA: dict[str, Callable[[str], str]] = {
    "program_takes_model_call": _program_call,
    "exported_program_as_model": _program_as_model,
}


def main(names: list[str]) -> None:
    rows = []
    for name in names or [*CASES, *EXTRA]:
        sides = {}
        for side in ("ours", "torch.onnx"):
            sides[side] = EXTRA[name](side) if name in EXTRA else _run(name, side, CASES[name])
        rows.append((name, sides["ours"], sides["torch.onnx"]))
        print(f"{name:30} | {sides['ours']:45} | {sides['torch.onnx']}", flush=True)
    good = [sum(r[i].startswith(("ok", "refused")) for r in rows) for i in (1, 2)]
    print(f"\nexpected outcome: ours {good[0]}/{len(rows)}, torch.onnx {good[1]}/{len(rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
