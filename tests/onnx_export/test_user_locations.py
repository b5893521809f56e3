"""Warnings and SARIF results name the user's line, never a frame inside onnx_export.

Capture patches replace library functions for the time of a capture (``torch.cdist``,
``F.unfold``, ``math.sqrt``, the recurrent layers' kernels) by wrappers in
``onnx_export/capture/patches/``. torch names the innermost frame outside torch as the
place of a guard or a node, which is then the wrapper; every place that locates
something (guards, node origins, warnings, the report) skips the exporter's frames,
torch's and the standard library's, and names the model's line that called the op
(``onnx_export/capture/_user_code.py``).
"""

from __future__ import annotations

import doctest
import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from onnx_export.capture import _specialized, _user_code
from onnx_export.capture._call import warn_guarded_ranges
from onnx_export.capture._specialized import RangeGuard
from onnx_export.capture.patches import PATCHES, _registry
from onnx_export.capture.patches._registry import swapped
from onnx_export.diagnostics import DiagnosticOptions, Level
from onnx_export.errors import DimensionNameWarning, ShapeRangeWarning
from onnx_export.translation._naming import MergedDimName, warn_merged_dim_names
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")

_HERE = Path(__file__).resolve()
_STRATEGIES = ("non_strict", "strict")


def _line(marker: str) -> int:
    """The line of this file whose comment is ``marker`` (not a quote of it)."""
    text = _HERE.read_text().splitlines()
    lines = [i for i, t in enumerate(text, 1) if marker in t and f'"{marker}"' not in t]
    assert len(lines) == 1, (marker, lines)
    return lines[0]


class _Codebook(nn.Module):
    """``torch.cdist`` (patched) against 3 codes: eager's mode asks ``rows > 25``."""

    def __init__(self) -> None:
        super().__init__()
        self.codes = nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x, self.codes).amin(-1)  # marker: cdist call


class _Patches(nn.Module):
    """``F.unfold`` (patched): torch's decomposition narrows the dynamic height and width."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.unfold(x, kernel_size=3, stride=2)  # marker: unfold call


class _Scaled(nn.Module):
    """``math.sqrt`` (patched) of a count read from data: its nodes are the patch's."""

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        n = count.item()
        torch._check(n >= 1)
        torch._check(n <= 64)
        scale = math.sqrt(n * 4)  # marker: sqrt call
        return x * scale


class _Recurrent(nn.Module):
    """``nn.LSTM`` (its kernel patched to one custom op), then a slice bounding the time."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lstm(x)[0]  # marker: lstm call
        return out[:, :3]  # marker: slice call


#: (name, model factory, example, another example in range, dynamic_shapes, patch,
#: the line of the guard's warning or None, the line every node of the patch is at).
_CASES: list[tuple[str, Callable[[], nn.Module], tuple[Any, ...], tuple[Any, ...], Any, str]] = [
    (
        "cdist",
        _Codebook,
        (torch.randn(30, 4),),
        (torch.randn(41, 4),),
        {"x": {0: "rows"}},
        "# marker: cdist call",
    ),
    (
        "unfold",
        _Patches,
        (torch.randn(1, 2, 9, 9),),
        (torch.randn(1, 2, 11, 7),),
        {"x": {2: "h", 3: "w"}},
        "# marker: unfold call",
    ),
    (
        "sqrt",
        _Scaled,
        (torch.randn(3), torch.tensor(4)),
        (torch.randn(3), torch.tensor(9)),
        None,
        "# marker: sqrt call",
    ),
    (
        "rnn",
        _Recurrent,
        (torch.randn(2, 7, 4),),
        (torch.randn(2, 12, 4),),
        {"x": {1: "time"}},
        "# marker: lstm call",
    ),
]
#: The cases whose export warns of a guarded range, and the line that set the guard.
_WARNED = {"cdist": "# marker: cdist call", "unfold": "# marker: unfold call", "rnn": None}


def _export(
    strategy: str, model: nn.Module, example: tuple[Any, ...], shapes: Any
) -> tuple[onnx_export.ONNXProgram, list[warnings.WarningMessage]]:
    options = onnx_export.ExportOptions(
        dynamic_shapes=shapes,
        capture_strategies=(strategy,),  # type: ignore[arg-type]  # a literal in the table
        diagnostic_options=DiagnosticOptions(verbosity=Level.NOTE),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnx_export.dynamo_export(model, *example, export_options=options)
    return program, caught


def _sarif_locations(program: onnx_export.ONNXProgram, folder: Path) -> list[tuple[str, str, int]]:
    """``(rule, file, line)`` of every located result in the saved report."""
    program.save_diagnostics(folder / "report.sarif")
    run = json.loads((folder / "report.sarif").read_text())["runs"][0]
    bases = {k: v["uri"] for k, v in run.get("originalUriBaseIds", {}).items()}
    found = []
    for result in run["results"]:
        for place in [*result.get("locations", ()), *result.get("relatedLocations", ())]:
            physical = place.get("physicalLocation")
            if physical is None:
                continue
            artifact = physical["artifactLocation"]
            uri = bases.get(artifact.get("uriBaseId", ""), "") + artifact["uri"]
            path = uri.removeprefix("file://")
            found.append((result["ruleId"], path, physical.get("region", {}).get("startLine", 0)))
    return found


@pytest.mark.parametrize("strategy", _STRATEGIES)
@pytest.mark.parametrize(
    ("name", "factory", "example", "other", "shapes", "marker"),
    _CASES,
    ids=[c[0] for c in _CASES],
)
def test_patched_ops_are_located_at_the_users_call(
    tmp_path: Path,
    strategy: str,
    name: str,
    factory: Callable[[], nn.Module],
    example: tuple[Any, ...],
    other: tuple[Any, ...],
    shapes: Any,
    marker: str,
) -> None:
    torch.manual_seed(0)
    model = factory()
    program, caught = _export(strategy, model, example, shapes)
    assert_onnx_program_close(program, model, *example)
    assert_onnx_program_close(program, model, *other)

    ranges = [w for w in caught if issubclass(w.category, ShapeRangeWarning)]
    for warning in caught:  # every warning of the export names this file
        assert Path(warning.filename).resolve() == _HERE, (warning.filename, warning.message)
    if name in _WARNED:
        expected = _line(_WARNED[name] or "# marker: slice call")
        assert ranges and {w.lineno for w in ranges} == {expected}, ranges
    located = _sarif_locations(program, tmp_path)
    assert located, "the report locates nothing"
    for rule, path, _ in located:  # not one result inside onnx_export, torch or the stdlib
        assert Path(path).resolve() == _HERE, (rule, path)
    lines = {line for rule, _, line in located if rule == "OXE0004"}  # translated nodes
    assert _line(marker) in lines, (marker, sorted(lines))


def test_a_guard_torch_names_at_a_patch_is_located_at_the_live_user_frame() -> None:
    """The shape env's text names ``patches/_cdist.py``: the model's line is taken instead."""
    patch = Path(_user_code.__file__).parent / "patches" / "_cdist.py"
    text = f"return original(x1, x2, p, compute_mode)  # {patch}:62 in cdist"
    recorder = _specialized._Recorder(0, [], False)
    location, _ = recorder._where(_specialized._SLOC.search(text))
    path, _, line = location.rpartition(":")
    assert Path(path).resolve() == _HERE and int(line) > 0, location


def _exporter_frame() -> Callable[..., None]:
    """A function whose frame is the exporter's: it calls ``f(*args)`` (as the CLI does)."""
    space: dict[str, Any] = {}
    exec(compile("def call(f, *args):\n    f(*args)\n", _user_code.__file__, "exec"), space)
    return space["call"]  # type: ignore[no-any-return]  # the function just defined


_through_the_exporter = _exporter_frame()


_GUARD = RangeGuard("s7", "L['x'].size()[0]", "s7 > 2", location="", code="")


@pytest.mark.parametrize("deeper", [False, True], ids=["called", "called-by-the-exporter"])
@pytest.mark.parametrize(
    ("function", "args", "category"),
    [
        (warn_guarded_ranges, ([("x[0]", "[3, inf)", _GUARD)],), ShapeRangeWarning),
        (
            warn_merged_dim_names,
            ([MergedDimName("batch2", "y[0]", "batch", "x[0]")],),
            DimensionNameWarning,
        ),
        (_user_code.warn_at_user_line, ("a note", UserWarning), UserWarning),
    ],
    ids=["guard-without-a-line", "merged-dim-name", "warn_at_user_line"],
)
def test_the_exporters_warnings_name_the_users_line(
    function: Callable[..., None], args: tuple[Any, ...], category: type[Warning], deeper: bool
) -> None:
    """Not the exporter's frame, nor pytest's: the line of this file that led to it."""
    with pytest.warns(category) as caught:
        _through_the_exporter(function, *args) if deeper else function(*args)  # marker: warned
    assert Path(caught[0].filename).resolve() == _HERE
    assert caught[0].lineno == _line("# marker: warned")


@pytest.mark.parametrize(
    "path",
    [
        *(p.apply.__code__.co_filename for p in PATCHES),
        _specialized.__file__,
        torch.__file__,
        torch.nn.functional.__file__,
        warnings.__file__,
        "<string>",
        "",
    ],
)
def test_the_exporters_torchs_and_the_stdlibs_files_are_not_the_users(path: str) -> None:
    assert not _user_code.is_user_code(path)


def test_the_users_files_and_other_libraries_are_the_users() -> None:
    assert _user_code.is_user_code(__file__)
    assert _user_code.is_user_code(pytest.__file__)  # a library's model code is the model's
    assert _user_code.is_exporter_code(_specialized.__file__)
    assert not _user_code.is_exporter_code(__file__)


def test_a_shortened_path_is_matched_at_a_folder_boundary() -> None:
    """``ixpath.py`` is not ``posixpath.py`` (a loaded module whose name ends so)."""
    assert _specialized._full_path("ixpath.py") == "ixpath.py"
    short = str(Path(*_HERE.parts[-3:]))
    assert _specialized._full_path(short) == str(_HERE)


@pytest.mark.parametrize("module", [_user_code, _registry], ids=lambda m: m.__name__)
def test_the_module_examples_run(module: Any) -> None:
    assert doctest.testmod(module).failed == 0


class _Owner:
    own = "own"


class _Child(_Owner):
    pass


def test_swapped_puts_back_what_was_there_and_drops_what_was_not() -> None:
    child = _Child()
    with swapped((_Child, "own", "class"), (child, "own", "instance"), (math, "tau", 6.0)):
        assert (child.own, _Child.own, math.tau) == ("instance", "class", 6.0)
    assert "own" not in vars(_Child) and "own" not in vars(child)  # inherited again
    assert child.own == "own" and math.tau == 2 * math.pi


def test_swapped_restores_when_a_later_swap_fails() -> None:
    with pytest.raises(AttributeError), swapped((math, "tau", 6.0), (None, "x", 1)):
        pass
    assert math.tau == 2 * math.pi


def test_the_checks_warnings_name_the_users_line_through_an_exporter_frame() -> None:
    """The training-mode and parity warnings of ``program/``: the user's line, however deep."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    model[1].running_mean.fill_(0.5)
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _through_the_exporter(onnx_export.dynamo_export, model, x)  # marker: checks
    ours = [w for w in caught if w.category.__module__.startswith("onnx_export")]
    names = {w.category.__name__ for w in ours}
    assert {"TrainingModeWarning", "ParityWarning"} <= names, [str(w.message) for w in ours]
    for w in ours:
        assert Path(w.filename).resolve() == _HERE, (w.category.__name__, w.filename)
        assert w.lineno == _line("# marker: checks")
    model.eval()
    program = onnx_export.dynamo_export(model, x)
    with torch.no_grad():
        assert_onnx_program_close(program, model, x)
        assert_onnx_program_close(program, model, torch.randn(2, 3, 8, 8) * 3)
