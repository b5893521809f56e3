"""Custom ops: registering ONNX functions, reporting unsupported ops, overriding built-ins."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from onnxscript import BOOL, FLOAT
from onnxscript import opset18 as op
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports


@torch.library.custom_op("testlib::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x + alpha * y


@scaled_add.register_fake
def _scaled_add_fake(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("testlib::shifted_square", mutates_args=())
def shifted_square(x: torch.Tensor) -> torch.Tensor:
    return (x + 1) ** 2


@shifted_square.register_fake
def _shifted_square_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def onnx_scaled_add(x: Any, y: Any, alpha: float) -> Any:
    return op.Add(x, op.Mul(y, op.CastLike(alpha, y)))


def onnx_shifted_square(x: Any) -> Any:
    shifted = op.Add(x, op.CastLike(1.0, x))
    return op.Mul(shifted, shifted)


class UsesScaledAdd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        return scaled_add(h, y, 0.5).relu()  # CALL:scaled_add


class Inner(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return shifted_square(x)  # CALL:shifted_square


class UsesBoth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.inner(x)
        return scaled_add(h, y, 2.0)  # CALL:scaled_add_in_both


def _line_of(function: Any, marker: str) -> int:
    """The line number (in this file) of the source line of ``function`` with ``marker``."""
    lines, first = inspect.getsourcelines(function)
    hits = [first + i for i, line in enumerate(lines) if line.rstrip().endswith(marker)]
    assert len(hits) == 1, f"marker {marker!r} not found exactly once"
    return hits[0]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(2, 3), torch.randn(2, 3)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(scaled_add, id="custom_op_object"),
        pytest.param("testlib::scaled_add", id="qualified_name"),
        pytest.param(torch.ops.testlib.scaled_add.default, id="op_overload"),
        pytest.param(torch.ops.testlib.scaled_add, id="op_overload_packet"),
    ],
)
def test_registered_custom_op_exports_and_matches(target: Any) -> None:
    torch.manual_seed(0)
    model = UsesScaledAdd().eval()
    registry = onnx_export.OnnxRegistry()
    registry.register_op(target, onnx_scaled_add)
    assert registry.is_registered("testlib::scaled_add")
    assert registry.custom_targets == ("testlib::scaled_add",)
    program = export_and_check(
        model, *_inputs(), options=onnx_export.ExportOptions(onnx_registry=registry)
    )
    ops = [node.op_type for node in program.model.graph]
    assert "Mul" in ops and "Add" in ops
    assert all(node.domain in ("", "ai.onnx") for node in program.model.graph)
    # Another input of the same shape runs through the same graph.
    assert_onnx_program_close(program, model, torch.randn(2, 3), torch.randn(2, 3))


def test_unregistered_custom_op_is_reported_with_node_and_line() -> None:
    model = UsesScaledAdd().eval()
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(model, *_inputs())
    error = caught.value
    message = str(error)
    line = _line_of(UsesScaledAdd.forward, "# CALL:scaled_add")
    where = f"{__file__}:{line}"
    assert "testlib::scaled_add" in message
    assert "'scaled_add'" in message  # the FX node
    assert where in message, message
    assert error.unsupported == (("testlib::scaled_add", "scaled_add", "", where),)
    assert isinstance(error, onnx_export.ConversionError)
    assert error.stage == "conversion"


def test_two_unsupported_custom_ops_are_reported_together() -> None:
    model = UsesBoth().eval()
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(model, *_inputs())
    error = caught.value
    message = str(error)
    assert "2 operator(s)" in message
    assert "testlib::scaled_add" in message and "testlib::shifted_square" in message
    inner_where = f"{__file__}:{_line_of(Inner.forward, '# CALL:shifted_square')}"
    outer_where = f"{__file__}:{_line_of(UsesBoth.forward, '# CALL:scaled_add_in_both')}"
    assert sorted(error.unsupported) == sorted(
        [
            ("testlib::shifted_square", "shifted_square", "inner", inner_where),
            ("testlib::scaled_add", "scaled_add", "", outer_where),
        ]
    )
    assert "'inner'" in message  # the module path of the nested call


def test_registering_one_of_two_leaves_only_the_other() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op("testlib::shifted_square", onnx_shifted_square)
    options = onnx_export.ExportOptions(onnx_registry=registry)
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(UsesBoth().eval(), *_inputs(), export_options=options)
    assert [entry[0] for entry in caught.value.unsupported] == ["testlib::scaled_add"]
    assert "shifted_square" not in str(caught.value).split("\n")[0]

    registry.register_op(scaled_add, onnx_scaled_add)
    model = UsesBoth().eval()
    export_and_check(model, *_inputs(), options=options)


def test_overriding_a_builtin_takes_effect() -> None:
    def doubled_relu(x: Any) -> Any:
        return op.Mul(op.Relu(x), op.CastLike(2.0, x))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    x = torch.randn(3, 4)
    registry = onnx_export.OnnxRegistry()
    registry.register_op("aten::relu", doubled_relu)
    assert registry.get("aten::relu")[0].is_custom
    program = onnx_export.dynamo_export(
        model, x, export_options=onnx_export.ExportOptions(onnx_registry=registry)
    )
    with torch.no_grad():
        expected = model(x) * 2
    torch.testing.assert_close(program(x), expected, rtol=1e-4, atol=1e-5)
    assert torch.count_nonzero(expected) > 0  # the override is visible in the numbers

    # A registry without the override keeps torchlib's relu.
    plain = onnx_export.dynamo_export(model, x)
    assert_onnx_program_close(plain, model, x)


def and_of_bools(self: BOOL, other: BOOL) -> BOOL:
    return op.And(self, other)


def and_of_floats(self: FLOAT, other: FLOAT) -> BOOL:
    return op.And(op.Cast(self, to=9), op.Cast(other, to=9))  # 9: BOOL


class LogicalAnd(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.logical_and(x, y)


@pytest.mark.parametrize("order", ["bools_first", "floats_first"])
@pytest.mark.parametrize(
    ("dtype", "expected_ops"),
    [(torch.bool, ["And"]), (torch.float32, ["Cast", "Cast", "And"])],
    ids=["bool", "float"],
)
def test_plain_function_overloads_are_chosen_by_their_annotations(
    order: str, dtype: torch.dtype, expected_ops: list[str]
) -> None:
    # Two plain-Python overloads of one op (as torch.onnx's custom_translation_table
    # list): the one whose annotated input types fit the node is used, whatever the order.
    overloads = [and_of_bools, and_of_floats]
    registry = onnx_export.OnnxRegistry()
    for function in overloads if order == "bools_first" else overloads[::-1]:
        registry.register_op("aten::logical_and", function)
    args = (torch.tensor([1, 0, 1, 0]).to(dtype), torch.tensor([1, 1, 0, 0]).to(dtype))
    options = onnx_export.ExportOptions(onnx_registry=registry)
    program = export_and_check(LogicalAnd(), *args, options=options)
    assert [node.op_type for node in program.model.graph] == expected_ops


def test_plain_function_whose_annotations_fit_nothing_is_used_with_a_warning() -> None:
    registry = onnx_export.OnnxRegistry()
    registry.register_op("aten::logical_and", and_of_floats)
    args = (torch.tensor([True, False]), torch.tensor([True, True]))
    options = onnx_export.ExportOptions(onnx_registry=registry)
    program = export_and_check(LogicalAnd(), *args, options=options)
    fallbacks = [d for d in program.diagnostic_context.diagnostics if d.rule.id == "OXE0005"]
    assert fallbacks and "annotated for other types than BOOL" in fallbacks[0].message


def test_register_op_rejects_non_callable() -> None:
    registry = onnx_export.OnnxRegistry()
    with pytest.raises(TypeError, match="callable"):
        registry.register_op("testlib::scaled_add", "not a function")  # type: ignore[arg-type]
    assert registry.custom_targets == ()


def test_target_name_forms_agree() -> None:
    expected = "testlib::scaled_add"
    assert onnx_export.target_name(scaled_add) == expected
    assert onnx_export.target_name(torch.ops.testlib.scaled_add.default) == expected
    assert onnx_export.target_name(torch.ops.testlib.scaled_add) == expected
    assert onnx_export.target_name("testlib::scaled_add.default") == expected
