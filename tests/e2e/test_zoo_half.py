"""The zoo exported in float16 (``ExportOptions(dtype="float16")``), run on ONNX Runtime's CPU.

Each model is exported from its float32 build with float32 example inputs (the option
converts both), its graph passes the ONNX checker, and its outputs are compared with eager
PyTorch running the model converted with ``.half()``: within float16's tolerance (3% of the
largest output, as two float16 computations that round at different points drift apart over
a deep model). Where the CPU provider has no float16 kernel for an op, the model runs through
the float32 upcast, which still checks the graph (float16 weights, float32 softmax).
CI runs a few models; the whole zoo runs with ``--runslow``.
"""

from __future__ import annotations

import copy
import os

import onnx
import onnx_ir as ir
import pytest
import torch
from torch.utils import _pytree as pytree

import onnx_export
from onnx_export.adapters import MissingKernelError
from tests.e2e.zoo_models import ZOO, _leaves

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

pytest.importorskip("transformers")

DEFAULT = ["bert", "llama", "resnet"]
#: transformers' own code that torch.export cannot capture in float16 only.
KNOWN = {
    "bart": "BART's encoder layer branches on `hidden_states.dtype == torch.float16 and not "
    "torch.isfinite(hidden_states).all()`: data-dependent control flow, in float16 only",
}
#: Relative to the largest output: float16's rounding over a whole model.
TOLERANCE = 3e-2


def _half(value: object) -> object:
    def narrow(t: torch.Tensor) -> torch.Tensor:
        return t.half() if t.dtype == torch.float32 else t

    return pytree.tree_map_only(torch.Tensor, narrow, value)


def _run_half(name: str) -> None:
    entry = ZOO[name]
    model = entry.build()
    args, kwargs = entry.inputs(*entry.size)
    options = onnx_export.ExportOptions(dtype="float16")
    with torch.no_grad():
        program = onnx_export.dynamo_export(
            copy.deepcopy(model), *copy.deepcopy(args), export_options=options, **kwargs
        )
    proto = ir.to_proto(program.model)
    onnx.checker.check_model(proto)
    graph_inputs = {v.name: v.type.tensor_type.elem_type for v in proto.graph.input}
    assert onnx.TensorProto.FLOAT not in graph_inputs.values(), graph_inputs
    try:
        got = _leaves(program(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
    except MissingKernelError:
        module = program._verification_module()[0]  # computing in float32 (upcast)
        got = _leaves(module(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
    with torch.no_grad():
        want = _leaves(model.half()(*_half(args), **_half(kwargs)))  # type: ignore[arg-type]
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, a.dtype, b.shape, b.dtype)
        if not b.is_floating_point() or not b.numel():
            continue
        error = float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(1e-3))
        assert error <= TOLERANCE, f"output {i}: max error {error:.3g} of the largest output"


@pytest.mark.parametrize("name", DEFAULT)
def test_zoo_float16(name: str) -> None:
    _run_half(name)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN[n], strict=True)) if n in KNOWN else n
        for n in ZOO
        if n not in DEFAULT
    ],
)
def test_zoo_float16_full(name: str, request: pytest.FixtureRequest) -> None:
    run_slow = request.config.getoption("--runslow", default=False)
    if not run_slow and os.environ.get("ONNX_EXPORT_RUNSLOW") != "1":
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")
    _run_half(name)
