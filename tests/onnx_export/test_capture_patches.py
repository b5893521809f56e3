"""Capture's patches of library code know what they patch (issue #41).

Each patch in ``capture/patches/`` declares its targets (library, qualified name, the
parameters it relies on); capture enters it only where they are found, skips it with a
SARIF note (OXE0027) where one is missing or changed, and lists the patches an export
ran with (OXE0026). These tests fail when an installed library loses a registered target.
"""

from __future__ import annotations

import contextlib
import json
import pkgutil
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers  # imported: every patch's targets are looked up

import onnx_export
import onnx_export.capture.patches as patches
from onnx_export.capture.patches import (
    PATCHES,
    Patch,
    PatchCall,
    Target,
    enter_patches,
    library_version,
    locate,
)
from onnx_export.cli.doctor import patch_table
from onnx_export.diagnostics import DiagnosticOptions, Level
from tests.helpers import assert_onnx_program_close

_TARGETS = [(p, t) for p in PATCHES for t in p.targets]
_VERBOSE = onnx_export.ExportOptions(
    dynamic_shapes={"x": {0: "rows"}},
    diagnostic_options=DiagnosticOptions(verbosity=Level.NOTE),
)


@pytest.mark.parametrize(
    ("patch", "target"), _TARGETS, ids=[f"{p.name}-{t.name}" for p, t in _TARGETS]
)
def test_every_registered_target_is_in_the_installed_library(patch: Patch, target: Target) -> None:
    """A library release that drops (or changes) what a patch rewrites fails here first."""
    state, sentence = locate(target, import_library=True)
    version = library_version(target.library)
    assert state in ("found", "other version"), (
        f"capture patch {patch.name!r}: {sentence}. It was tested against "
        f"{', '.join(patch.tested)}; {target.library} {version} is installed: update the patch "
        "(or its Target's since/before) in onnx_export/capture/patches/."
    )


def test_every_patch_module_registers_its_record() -> None:
    folder = Path(patches.__file__).parent
    helpers = {"_registry", "_mrope_index"}  # the record type; M-RoPE's tensor computation
    modules = {m.name for m in pkgutil.iter_modules([str(folder)])} - helpers
    registered = {p.apply.__module__.rsplit(".", 1)[-1] for p in PATCHES}
    assert modules == registered
    assert len({p.name for p in PATCHES}) == len(PATCHES)
    for patch in PATCHES:
        assert patch.targets and patch.tested and patch.why, patch.name


class Distances(torch.nn.Module):
    """``torch.cdist`` of the inputs to fixed codes (a patched torch function)."""

    def __init__(self) -> None:
        super().__init__()
        self.codes = torch.nn.Parameter(torch.randn(30, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x, self.codes).amin(-1)


def _results(program: onnx_export.ONNXProgram, rule_id: str) -> list[Any]:
    return [d for d in program.diagnostic_context.diagnostics if d.rule.id == rule_id]


def test_the_report_lists_the_patches_an_export_ran_with(tmp_path: Path) -> None:
    model, x = Distances(), torch.randn(5, 4)
    program = onnx_export.dynamo_export(model, x, export_options=_VERBOSE)
    assert_onnx_program_close(program, model, x)
    assert_onnx_program_close(program, model, torch.randn(1, 4))
    (listed,) = _results(program, "OXE0026")
    names = listed.properties["patches"]
    assert {"cdist", "rnn", "small_constants", "sdpa_causal"} <= set(names)
    assert not _results(program, "OXE0027")  # every target is found here
    program.save_diagnostics(tmp_path / "report.sarif")
    sarif = json.loads((tmp_path / "report.sarif").read_text())
    results = sarif["runs"][0]["results"]
    assert any(r["ruleId"] == "OXE0026" and "cdist" in r["message"]["text"] for r in results)


def test_a_missing_target_skips_its_patch_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library lost what the patch replaces: the export goes on without the patch."""
    monkeypatch.delattr(torch.nn.functional, "unfold")
    model, x = Distances(), torch.randn(5, 4)
    program = onnx_export.dynamo_export(model, x, export_options=_VERBOSE)
    assert_onnx_program_close(program, model, x)
    (skipped,) = _results(program, "OXE0027")
    assert "unfold was skipped" in skipped.message
    assert "torch.nn.functional.unfold is missing in torch" in skipped.message
    assert "unfold" not in _results(program, "OXE0026")[0].properties["patches"]


def test_a_changed_signature_skips_its_patch_not_a_type_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``cdist`` without ``compute_mode``: the patch would pass it, so it is left out."""
    original = torch.cdist

    def cdist(x1: torch.Tensor, x2: torch.Tensor, p: float = 2.0) -> torch.Tensor:
        return original(x1, x2, p)

    monkeypatch.setattr(torch, "cdist", cdist)
    model, x = Distances(), torch.randn(5, 4)
    program = onnx_export.dynamo_export(model, x, export_options=_VERBOSE)
    assert_onnx_program_close(program, model, x)
    assert_onnx_program_close(program, model, torch.randn(2, 4))
    (skipped,) = _results(program, "OXE0027")
    assert "cdist was skipped" in skipped.message and "takes no compute_mode" in skipped.message


def test_a_patch_that_raises_on_entering_is_skipped_with_its_error() -> None:
    def broken(call: PatchCall) -> contextlib.AbstractContextManager[None]:
        raise TypeError("unexpected keyword argument 'position_bias'")

    here = Target("math", "sqrt")
    fine = Patch(
        "fine", (here,), ("python 3.11",), "an example", lambda c: contextlib.nullcontext()
    )
    bad = Patch("broken", (here,), ("python 3.11",), "an example", broken)
    with contextlib.ExitStack() as stack:
        outcomes = enter_patches(stack, [bad, fine], PatchCall(torch.nn.Identity()))
    assert [(o.name, o.entered) for o in outcomes] == [("broken", False), ("fine", True)]
    assert outcomes[0].reason == (
        "entering it raised TypeError: unexpected keyword argument 'position_bias'"
    )


@pytest.mark.parametrize(
    ("target", "state"),
    [
        (Target("torch", "cdist", ("x1", "x2")), "found"),
        (Target("torch", "no_such_function"), "missing"),
        (Target("torch", "cdist", ("no_such_parameter",)), "changed"),
        (Target("torch", "cdist", since="999.0"), "other version"),
        (Target("torch", "cdist", before="2.0"), "other version"),
        (Target("no_such_library_here", "f"), "not installed"),
    ],
    ids=["found", "missing", "changed", "newer", "older", "not-installed"],
)
def test_locate_says_what_became_of_a_target(target: Target, state: str) -> None:
    assert locate(target, import_library=True)[0] == state


def test_a_library_the_model_did_not_import_is_not_looked_up() -> None:
    """Capture never imports a library for a patch (``pydoc_data`` stands for transformers)."""
    import sys

    target = Target("pydoc_data.topics", "topics")
    assert "pydoc_data" not in sys.modules
    assert locate(target)[0] == "not imported"
    assert "pydoc_data" not in sys.modules
    assert locate(target, import_library=True)[0] == "found"


def test_doctor_prints_the_patch_table() -> None:
    table = patch_table()
    assert table.splitlines()[0].startswith(
        f"Capture patches (onnx_export/capture/patches/): {len(PATCHES)}"
    )
    for patch in PATCHES:
        assert f"  {patch.name} " in table
    assert f"transformers {transformers.__version__}" in table
    assert "0 with a target missing or changed" in table


def test_a_librarys_release_is_looked_up_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # importlib.metadata scans sys.path on each call: 31 look-ups an export were 0.1-0.5 s
    # of its capture (#39). A library not found is looked up again (it may be installed).
    import importlib.metadata

    from onnx_export.capture.patches import _registry

    monkeypatch.setattr(_registry, "_VERSIONS", {})
    looked: list[str] = []
    real = importlib.metadata.version

    def counted(name: str) -> str:
        looked.append(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", counted)
    first = library_version("transformers")
    assert library_version("transformers") == first == transformers.__version__
    assert looked == ["transformers"]
    assert library_version("no-such-library-here") is None
    assert library_version("no-such-library-here") is None
    assert looked.count("no-such-library-here") == 2
