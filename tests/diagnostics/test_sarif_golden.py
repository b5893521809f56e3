"""A full failing-export report compared with a golden file after normalisation.

The golden file is ``tests/golden/sarif_context_failing_export.json``; regenerate every golden
file the one way ``tests/golden/README.md`` describes.
"""

from __future__ import annotations

from onnx_export.diagnostics import (
    DiagnosticContext,
    DiagnosticOptions,
    ExceptionInfo,
    Level,
    Location,
    Stack,
    locations_from_stack_trace,
    rules,
)
from tests.golden_files import check_golden
from tests.sarif_helpers import assert_valid_sarif, normalize_sarif

SOURCE_ROOT = "/project"
STACK_TRACE = """\
  File "/project/train.py", line 88, in <module>
    onnx_program = onnx_export.dynamo_export(model, x)
  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
  File "/project/model.py", line 14, in forward
    return torch.special.bessel_j0(self.linear(x)) * 2
"""


def failing_export() -> DiagnosticContext:
    context = DiagnosticContext(
        "onnx-export",
        "0.1.0",
        DiagnosticOptions(verbosity=Level.NOTE),
        source_root=SOURCE_ROOT,
    )
    frames = locations_from_stack_trace(STACK_TRACE)
    user_frames = tuple(f for f in frames if "site-packages" not in f.uri)
    dynamo_error = ExceptionInfo(
        "torch._dynamo.exc.Unsupported",
        "call_function BuiltinVariable(print)",
        Stack((Location("/venv/lib/python3.11/site-packages/torch/_dynamo/x.py", 10),)),
    )
    context.emit(
        rules.CAPTURE_ATTEMPT_FAILED,
        message_args={
            "strategy": "strict",
            "exception_type": dynamo_error.type_name,
            "exception_message": dynamo_error.message,
        },
        locations=[frames[-1]],
        exception=dynamo_error,
    )
    context.emit(rules.CAPTURE_SUCCEEDED, message_args={"strategy": "non-strict", "seconds": 0.17})
    context.emit(
        rules.UNSUPPORTED_OP,
        message_args={"op": "aten::special_bessel_j0", "node": "bessel_j0", "module": "net"},
        markdown="No ONNX function is registered for `aten::special_bessel_j0`.",
        locations=[frames[-1]],
        related_locations=[Location("/project/model.py", 9, message="Module defined here")],
        stacks=[Stack(frames, message="Where the node was created")],
        code_flow=user_frames,
        properties={"target": "aten.special_bessel_j0.default", "dtypes": ["float32"]},
    )
    context.emit(
        rules.EXPORT_FAILED,
        message_args={"stage": "translation", "exception_message": "1 unsupported operator"},
    )
    context.finish(success=False, exception=RuntimeError("1 unsupported operator"))
    return context


def test_failing_export_report_matches_golden() -> None:
    log = failing_export().to_sarif()
    assert_valid_sarif(log)
    check_golden("sarif_context_failing_export", normalize_sarif(log, root=SOURCE_ROOT))


def test_normalize_replaces_times_version_and_root() -> None:
    normalized = normalize_sarif(failing_export().to_sarif(), root=SOURCE_ROOT)
    run = normalized["runs"][0]
    invocation = run["invocations"][0]
    assert invocation["startTimeUtc"] == invocation["endTimeUtc"] == "<TIME>"
    assert run["tool"]["driver"]["version"] == "<VERSION>"
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == "file://<ROOT>/"
