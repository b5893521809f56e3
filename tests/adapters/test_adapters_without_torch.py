"""The runtime side works where ``import torch`` (and ``import onnx``) fail."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
from adapters_testing import make_model
from onnx import TensorProto, helper

from onnx_export.adapters import build_adapter_spec

PROJECT_ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys
    sys.modules["torch"] = None  # `import torch` now raises ImportError
    sys.modules["onnx"] = None   # and so does `import onnx`: onnxruntime alone must do
    import numpy as np
    from onnx_export import adapters

    module = adapters.load(sys.argv[1])
    a = np.array([[1, 2, 3]], np.float32)
    out = module({"a": a, "b": a * 10}, scale=2.0)
    try:
        import torch  # noqa: F401
        torch_status = "importable"
    except ImportError:
        torch_status = "blocked"
    print(json.dumps({
        "type": type(out).__name__,
        "keys": list(out),
        "sum": out["sum"].tolist(),
        "tag": out["tag"],
        "torch": torch_status,
        "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnx")
                          and sys.modules[m] is not None),
    }))
    """
)


def test_load_and_run_without_torch(tmp_path: Path) -> None:
    def forward(x, scale=1.0): ...  # type: ignore[no-untyped-def]

    x = {"a": np.zeros((1, 3), np.float32), "b": np.zeros((1, 3), np.float32)}
    spec = build_adapter_spec(
        inspect.signature(forward),
        (x,),
        {"scale": 2.0},
        {"sum": x["a"], "tag": "ok"},
        input_shapes={0: ("n", 3), 1: ("n", 3)},
        output_shapes={0: ("n", 3)},
    )
    model = make_model(
        [("x.a", TensorProto.FLOAT, ("n", 3)), ("x.b", TensorProto.FLOAT, ("n", 3))],
        [("output.sum", TensorProto.FLOAT, ("n", 3))],
        [helper.make_node("Add", ["x.a", "x.b"], ["output.sum"])],
        spec,
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=120,
        env={"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {
        "type": "dict",
        "keys": ["sum", "tag"],
        "sum": [[11.0, 22.0, 33.0]],
        "tag": "ok",
        "torch": "blocked",
        "modules": [],
    }
