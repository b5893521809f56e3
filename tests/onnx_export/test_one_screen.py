"""One screen per error (issue #38): every ``OnnxExportError`` message up to the SARIF path
fits in 15 lines and 1,200 characters, says what failed, where in the user's code, and the
next step; the details go to the SARIF report (and to ``-v`` on the CLI).

Each error kind of the catalogue is built from a real failing export.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import onnx_export
from onnx_export.errors import SCREEN_CHARS, SCREEN_LINES, fit_to_screen

pytestmark = pytest.mark.usefixtures("private_temp_folder")

_SARIF_LINE = "The full diagnostic report (SARIF) is at:"


def _screen(error: BaseException) -> str:
    """The message up to the SARIF path."""
    return str(error).split(f"\n{_SARIF_LINE}")[0]


def _assert_one_screen(error: BaseException) -> None:
    screen = _screen(error)
    assert len(screen.splitlines()) <= SCREEN_LINES, screen
    assert len(screen) <= SCREEN_CHARS, f"{len(screen)} characters:\n{screen}"
    if not isinstance(error, onnx_export.ExportInputError):  # (those say what the model takes)
        assert "Next steps" in screen, screen
    assert "RecordedValue" not in screen


def _sarif(error: onnx_export.OnnxExportError) -> dict[str, Any]:
    assert error.report_path is not None
    return json.loads(error.report_path.read_text())


# -- the catalogue: a real failing export per error kind -------------------------------


class _Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def _tuple_habit() -> None:
    """torch.onnx.export's ``(x,)``: torch's overload listing per strategy (2,400 chars)."""
    onnx_export.dynamo_export(_Conv(), (torch.randn(1, 3, 8, 8),))


class _Add(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def _unknown_input_in_spec() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "b"}, "z": {0: "b"}})
    onnx_export.dynamo_export(_Add(), torch.randn(2, 4), torch.randn(2, 4), export_options=options)


def _dims_fixed_by_the_model() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "b"}, "y": {1: "c"}})
    onnx_export.dynamo_export(_Add(), torch.randn(2, 4), torch.randn(2, 4), export_options=options)


@torch.library.custom_op("one_screen_test::opaque", mutates_args=())
def _opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_opaque.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _ManyOpaque(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(30):
            x = _opaque(x) + 1
        return x


def _thirty_unsupported_nodes() -> None:
    onnx_export.dynamo_export(_ManyOpaque(), torch.randn(2, 3))


class _EluBySize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.elu(x, alpha=torch.sym_float(x.shape[0]))


def _symbolic_attribute() -> None:
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "n"}})
    onnx_export.dynamo_export(_EluBySize(), torch.randn(4, 3), export_options=options)


class _HalfDenoiser(nn.Module):
    """A float16 model whose timestep embedding is computed in float32."""

    def __init__(self) -> None:
        super().__init__()
        self.time = nn.Linear(8, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        freqs = torch.exp(-math.log(10000) * torch.arange(4, dtype=torch.float32) / 4)
        args = t[:, None].float() * freqs[None]
        embedding = torch.cat([torch.sin(args), torch.cos(args)], dim=-1)  # float32
        h = self.time(embedding)
        return self.proj(x) + h


def _float32_into_half_linear() -> None:
    model = _HalfDenoiser().half()
    onnx_export.dynamo_export(model, torch.randn(2, 16, dtype=torch.float16), torch.tensor([1, 5]))


CATALOGUE: dict[str, tuple[Callable[[], None], type[onnx_export.OnnxExportError]]] = {
    "tuple_habit_overload_listing": (_tuple_habit, onnx_export.CaptureError),
    "unknown_input_in_spec": (_unknown_input_in_spec, onnx_export.ExportInputError),
    "dims_fixed_by_the_model": (_dims_fixed_by_the_model, onnx_export.CaptureError),
    "thirty_unsupported_nodes": (_thirty_unsupported_nodes, onnx_export.UnsupportedOpsError),
    "symbolic_attribute": (_symbolic_attribute, onnx_export.ConversionError),
    "float32_into_half_linear": (_float32_into_half_linear, onnx_export.ConversionError),
}


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_every_error_fits_one_screen(name: str) -> None:
    failing, kind = CATALOGUE[name]
    with pytest.raises(kind) as caught:
        failing()
    _assert_one_screen(caught.value)
    assert _SARIF_LINE in str(caught.value)


def test_left_out_details_are_in_the_report() -> None:
    with pytest.raises(onnx_export.CaptureError) as caught:
        _tuple_habit()
    error = caught.value
    assert len(error.details) > SCREEN_CHARS  # torch's listing: cut on screen...
    assert "more line(s) of detail" in _screen(error)
    report = _sarif(error)
    texts = [r["message"]["text"] for r in report["runs"][0]["results"]]
    assert any("expected one of" in t and "tuple of ints stride" in t for t in texts)
    invocation = report["runs"][0]["invocations"][0]
    assert "tuple of ints stride" in json.dumps(invocation)  # ...whole in the report


def test_thirty_unsupported_nodes_say_how_many_are_left_out() -> None:
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        _thirty_unsupported_nodes()
    assert len(caught.value.unsupported) == 30  # all of them on the error object
    assert "one_screen_test::opaque" in _screen(caught.value).splitlines()[0]


def test_dtype_mix_points_at_the_line_that_made_the_odd_tensor() -> None:
    with pytest.raises(onnx_export.ConversionError) as caught:
        _float32_into_half_linear()
    error = caught.value
    screen = _screen(error)
    assert "float32 and float16" in screen
    assert "report it" not in screen  # the user can fix it
    lines, start = inspect.getsourcelines(_HalfDenoiser.forward)
    made = start + next(i for i, t in enumerate(lines) if "embedding = torch.cat" in t)
    used = start + next(i for i, t in enumerate(lines) if "self.time(embedding)" in t)
    assert error.source is not None and error.source.line == made
    assert f":{made} " in screen and f":{used} " in screen
    failed = [r for r in _sarif(error)["runs"][0]["results"] if r["ruleId"] == "OXE0018"]
    region = failed[0]["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == made


def test_symbolic_attribute_is_not_our_bug_and_names_no_internal_type() -> None:
    with pytest.raises(onnx_export.ConversionError) as caught:
        _symbolic_attribute()
    screen = _screen(caught.value)
    assert "alpha" in screen and "as a constant" in screen
    assert "register" not in screen and "RecordedValue" not in screen


def test_an_input_error_is_located_at_the_call_not_the_class() -> None:
    with pytest.raises(onnx_export.ExportInputError) as caught:
        _unknown_input_in_spec()
    failed = [r for r in _sarif(caught.value)["runs"][0]["results"] if r["ruleId"] == "OXE0018"]
    region = failed[0]["locations"][0]["physicalLocation"]["region"]
    assert "dynamo_export(" in region["snippet"]["text"]


def test_a_command_line_export_is_located_at_forward_not_the_class_line() -> None:
    from onnx_export.reporting._records import _model_source

    (location,) = _model_source(_Add())
    assert location.snippet is not None and location.snippet.startswith("def forward(")


def test_fit_to_screen_keeps_first_line_and_next_steps() -> None:
    message = (
        "What failed, at model.py:3.\n"
        + "\n".join(f"  - strategy {i}: " + "x" * 150 + "\n      continuation" for i in range(20))
        + "\nNext steps: do this."
    )
    fitted = fit_to_screen(message)
    lines = fitted.splitlines()
    assert lines[0] == "What failed, at model.py:3."
    assert lines[-1] == "Next steps: do this."
    assert len(lines) <= SCREEN_LINES and len(fitted) <= SCREEN_CHARS
    assert "continuation" not in fitted  # bullets before their continuation lines
    assert fit_to_screen("short. Next steps: x.") == "short. Next steps: x."


def test_a_one_line_message_keeps_its_next_steps() -> None:
    message = "Boom: " + "y" * 2000 + " Next steps: fix it."
    fitted = fit_to_screen(message)
    assert fitted.endswith("Next steps: fix it.") and len(fitted) <= SCREEN_CHARS


class _MixedMatmul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.double()


def test_dtype_mix_of_two_activations_names_the_odd_one() -> None:
    with pytest.raises(onnx_export.ConversionError) as caught:
        onnx_export.dynamo_export(_MixedMatmul(), torch.randn(2, 3), torch.randn(3, 4))
    screen = _screen(caught.value)
    assert "gets a float64 tensor" in screen and "inputs are float32" in screen
