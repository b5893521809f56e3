"""The stack traces capture records for each node (capture patch ``stack_traces``, #39).

Non-strict capture records each node's trace itself, from the interpreter's frames: the
text is torch's own (every frame from the outermost ``forward`` down, torch's
uninteresting files left out), ending at the op's call into the tracer, where torch's
went on into the tracer's frames. These tests hold it to torch's text and to the lines
the report and the errors name.
"""

from __future__ import annotations

import doctest
import sys

import torch
from torch import nn

import onnx_export
import onnx_export.capture._strategies as strategies
from onnx_export.capture._call import capture_call, forward_signature, prepare_call
from onnx_export.capture.patches import _stack_traces
from onnx_export.capture.patches._registry import swapped
from onnx_export.translation._source import node_origin
from tests.capture_patches import patches_with_torchs_stack_traces
from tests.helpers import assert_onnx_program_close


def _grid(x: torch.Tensor) -> torch.Tensor:
    return torch.linspace(0, 1, x.shape[-1]) * x  # the op's own line: a helper's


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _grid(self.lin(x)).relu()


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(_Block(), _Block())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x).softmax(-1)


def _traces(torchs: bool = False) -> dict[str, str]:
    model, x = _Net().eval(), torch.randn(3, 6)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    call = prepare_call(model, forward_signature(model), (x,), {}, options)
    patches = patches_with_torchs_stack_traces() if torchs else strategies.PATCHES
    with swapped((strategies, "PATCHES", patches)):
        program, _ = capture_call(call, options)
    assert program is not None
    return {n.name: n.meta.get("stack_trace") or "" for n in program.graph.nodes}


def test_the_traces_are_torchs_text_down_to_the_ops_call() -> None:
    ours, torchs = _traces(), _traces(torchs=True)
    assert ours.keys() == torchs.keys()
    recorded = [name for name, text in ours.items() if text]
    assert len(recorded) >= 8  # every op of the model
    for name in recorded:
        assert torchs[name].startswith(ours[name]), name
        assert ours[name].startswith('File "')
        assert "CapturedTraceback" not in ours[name]  # the tracer's own frames end torch's


def test_each_node_is_located_at_its_own_line_through_a_helper() -> None:
    ours = _traces()
    lines = {name: text.splitlines() for name, text in ours.items() if text}
    linspace = [name for name in lines if name.startswith("linspace")]
    assert linspace
    for name in linspace:
        assert any("torch.linspace(0, 1, x.shape[-1]) * x" in line for line in lines[name])
        # from the outermost forward down: the model's own forward, then the block's
        outer = next(i for i, line in enumerate(lines[name]) if "self.blocks(x)" in line)
        inner = next(i for i, line in enumerate(lines[name]) if "_grid(self.lin(x))" in line)
        assert outer < inner


def test_the_origin_and_the_export_name_the_users_lines() -> None:
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(3, 6)
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "batch"}})
    program = onnx_export.dynamo_export(model, x, export_options=options)
    assert program.exported_program is not None
    origins = [node_origin(n) for n in program.exported_program.graph.nodes]
    files = {o.file for o in origins if o.file}
    assert files == {__file__}
    assert {o.code for o in origins if o.code} >= {
        "return torch.linspace(0, 1, x.shape[-1]) * x  # the op's own line: a helper's",
        "return self.blocks(x).softmax(-1)",
    }
    for batch in (3, 5, 1):
        assert_onnx_program_close(program, model, torch.randn(batch, 6))


def test_a_frame_repeated_four_times_is_folded_as_traceback_folds_it() -> None:
    def forward(depth: int) -> str:
        if depth:
            return forward(depth - 1)
        return _stack_traces.user_stack_trace(sys._getframe())

    text = forward(5)
    assert "[Previous line repeated" in text
    assert forward(1).count("in forward") == 2


def test_the_module_examples_run() -> None:
    assert doctest.testmod(_stack_traces).failed == 0
