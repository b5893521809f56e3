"""Exporting in a process where ``torch.onnx.export`` or onnxscript's optimizer ran first.

People moving from torch.onnx compare both exporters in one notebook. Both use
onnxscript's rewrite rules, whose matchers keep the last node they tried; our optimizer
copies the rules it changes and once copied that node too (a node of torch.onnx's model,
whose onnxscript objects cannot be copied: ``Opset.__new__() missing 2 required
positional arguments``). Each sequence runs in a fresh interpreter, exactly as a user's
notebook would, since our copies are made once a process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_PRELUDES = {
    "torch_onnx_export": """
        torch.onnx.export(model, (x,), os.path.join(folder, "t.onnx"), dynamo=True)
    """,
    "onnxscript_optimizer": """
        import onnxscript.optimizer
        other = torch.onnx.export(model, (x,), dynamo=True, optimize=False).model
        onnxscript.optimizer.optimize(other)
    """,
}

_SCRIPT = """
import os, tempfile, warnings
import torch
import onnx_export
warnings.simplefilter("ignore")
torch.manual_seed(0)
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))

model = Model().eval()
x = torch.randn(2, 4)
folder = tempfile.mkdtemp()
{prelude}
options = onnx_export.ExportOptions(dynamic_shapes={{"x": {{0: "batch"}}}})
program = onnx_export.dynamo_export(model, x, export_options=options)
for batch in (2, 1, 5):
    inputs = torch.randn(batch, 4)
    torch.testing.assert_close(program(inputs), model(inputs).detach(), rtol=1e-4, atol=1e-5)
print("OK")
"""


@pytest.mark.parametrize("prelude", sorted(_PRELUDES))
def test_our_export_after_another_in_the_same_process(
    prelude: str,
) -> None:
    script = _SCRIPT.format(prelude=textwrap.dedent(_PRELUDES[prelude]))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]
