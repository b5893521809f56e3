"""DiagnosticContext: what it keeps, and the SARIF log it writes."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from onnx_export.diagnostics import (
    Diagnostic,
    DiagnosticContext,
    DiagnosticOptions,
    ExceptionInfo,
    Level,
    Location,
    SarifWriteError,
    Stack,
    rules,
)
from tests.sarif_helpers import assert_valid_sarif

NOTE = Diagnostic(rules.MODEL_SAVED, Level.NOTE, "Saved.")
WARNING = Diagnostic(rules.DISPATCH_FALLBACK, Level.WARNING, "Fell back.")
ERROR = Diagnostic(rules.UNSUPPORTED_OP, Level.ERROR, "Unsupported.")
NONE = Diagnostic(rules.LOG_RECORD, Level.NONE, "Trace.")


def make_context(**option_values: object) -> DiagnosticContext:
    return DiagnosticContext("onnx-export", "0.1.0", DiagnosticOptions(**option_values))


def run_of(context: DiagnosticContext) -> dict[str, Any]:
    log = context.to_sarif()
    assert_valid_sarif(log)
    (run,) = log["runs"]
    return run


def unsupported_op(context: DiagnosticContext, **extra: object) -> Diagnostic | None:
    return context.emit(
        rules.UNSUPPORTED_OP,
        message_args={"op": "aten::foo", "node": "foo_1", "module": "net"},
        **extra,
    )


# --- what is kept -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verbosity", "kept"),
    [
        (Level.NONE, ["Trace.", "Saved.", "Fell back.", "Unsupported."]),
        (Level.NOTE, ["Saved.", "Fell back.", "Unsupported."]),
        (Level.WARNING, ["Fell back.", "Unsupported."]),
        (Level.ERROR, ["Unsupported."]),
    ],
    ids=["none-keeps-all", "note-keeps-notes", "warning-default", "error-only"],
)
def test_verbosity_filters_below_level_but_keeps_errors(verbosity: Level, kept: list[str]) -> None:
    context = make_context(verbosity=verbosity)
    for diagnostic in (NONE, NOTE, WARNING, ERROR):
        context.log(diagnostic)
    assert [d.message for d in context.diagnostics] == kept


def test_default_options_drop_notes() -> None:
    context = DiagnosticContext("onnx-export", "0.1.0")
    assert context.log(NOTE) is None
    assert context.diagnostics == ()


def test_log_returns_what_was_kept() -> None:
    context = make_context()
    assert context.log(WARNING) is WARNING
    assert context.log(NOTE) is None


def test_warnings_as_errors_records_warnings_as_errors() -> None:
    context = make_context(warnings_as_errors=True, verbosity=Level.NOTE)
    kept = context.log(WARNING)
    assert kept is not None and kept.level is Level.ERROR
    assert context.log(NOTE) == NOTE  # notes are left alone
    assert context.errors() == (kept,)
    assert run_of(context)["results"][0]["level"] == "error"


def test_errors_are_kept_even_at_highest_verbosity_threshold() -> None:
    context = make_context(verbosity=Level.ERROR)
    context.log(WARNING)
    context.log(ERROR)
    assert context.has_errors()
    assert context.errors() == (ERROR,)


def test_diagnostics_property_is_a_snapshot() -> None:
    context = make_context()
    snapshot = context.diagnostics
    context.log(ERROR)
    assert snapshot == ()
    assert context.diagnostics == (ERROR,)


# --- emit -----------------------------------------------------------------------------------


def test_emit_formats_the_message_and_uses_the_default_level() -> None:
    context = make_context()
    diagnostic = unsupported_op(context)
    assert diagnostic is not None
    assert diagnostic.level is Level.ERROR
    assert (
        diagnostic.message
        == "No ONNX function is registered for aten::foo (node foo_1 in module net)."
    )


def test_emit_level_overrides_the_default() -> None:
    context = make_context()
    diagnostic = unsupported_op(context, level=Level.WARNING)
    assert diagnostic is not None and diagnostic.level is Level.WARNING


def test_emit_with_missing_argument_names_rule_and_fields() -> None:
    context = make_context()
    with pytest.raises(KeyError, match=r"OXE0006 \(unsupported-op\).*'node', 'module'"):
        context.emit(rules.UNSUPPORTED_OP, message_args={"op": "aten::foo"})


def test_emit_turns_an_exception_into_exception_info_with_a_stack() -> None:
    context = make_context()
    try:
        raise ValueError("bad shape")
    except ValueError as error:
        diagnostic = context.emit(
            rules.EXPORT_FAILED,
            message_args={"stage": "capture", "exception_message": str(error)},
            exception=error,
        )
    assert diagnostic is not None and diagnostic.exception is not None
    assert str(diagnostic.exception) == "ValueError: bad shape"
    (result,) = run_of(context)["results"]
    (stack,) = result["stacks"]
    assert stack["message"]["text"] == "ValueError: bad shape"
    assert stack["frames"][0]["location"]["logicalLocations"][0]["name"] == (
        "test_emit_turns_an_exception_into_exception_info_with_a_stack"
    )


# --- options and construction ---------------------------------------------------------------


def test_options_reject_unknown_write_report() -> None:
    with pytest.raises(ValueError, match="write_report must be one of"):
        DiagnosticOptions(write_report="sometimes")


def test_options_reject_non_level_verbosity() -> None:
    with pytest.raises(TypeError, match="verbosity must be a Level"):
        DiagnosticOptions(verbosity="note")


def test_context_rejects_duplicate_rule_ids() -> None:
    with pytest.raises(ValueError, match="OXE0001"):
        DiagnosticContext("t", "1", rules=[rules.CAPTURE_ATTEMPT_FAILED] * 2)


def test_options_are_exposed() -> None:
    options = DiagnosticOptions(verbosity=Level.NOTE, report_path="r.sarif")
    assert DiagnosticContext("t", "1", options).options is options


# --- the SARIF log ------------------------------------------------------------------------------


def test_empty_context_is_a_valid_log() -> None:
    log = make_context().to_sarif()
    assert_valid_sarif(log)
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert run["results"] == []
    assert run["tool"]["driver"]["rules"] == []
    assert "artifacts" not in run and "originalUriBaseIds" not in run
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is True
    assert invocation["startTimeUtc"].endswith("Z")
    assert "endTimeUtc" not in invocation


def test_driver_describes_the_tool() -> None:
    context = DiagnosticContext("my-tool", "9.9", information_uri="https://example.com/tool")
    driver = run_of(context)["tool"]["driver"]
    assert (driver["name"], driver["version"], driver["informationUri"]) == (
        "my-tool",
        "9.9",
        "https://example.com/tool",
    )


def test_successful_run_records_end_time_and_success() -> None:
    context = make_context(verbosity=Level.NOTE)
    context.emit(rules.CAPTURE_SUCCEEDED, message_args={"strategy": "strict", "seconds": 0.5})
    context.finish(success=True)
    invocation = run_of(context)["invocations"][0]
    assert invocation["executionSuccessful"] is True
    assert invocation["endTimeUtc"] >= invocation["startTimeUtc"]
    assert "toolExecutionNotifications" not in invocation


def test_finish_with_exception_adds_an_error_notification() -> None:
    context = make_context()
    unsupported_op(context)
    try:
        try:
            raise KeyError("weight")
        except KeyError as inner:
            raise RuntimeError("translation failed") from inner
    except RuntimeError as error:
        context.finish(success=False, exception=error)
    invocation = run_of(context)["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["message"]["text"] == "RuntimeError: translation failed"
    exception = notification["exception"]
    assert exception["kind"] == "RuntimeError"
    assert exception["stack"]["frames"], "the exception's stack is recorded"
    assert exception["innerExceptions"][0]["kind"] == "KeyError"


def test_before_finish_success_reflects_errors_so_far() -> None:
    context = make_context()
    unsupported_op(context)
    assert run_of(context)["invocations"][0]["executionSuccessful"] is False


def test_finish_twice_keeps_the_last_outcome() -> None:
    context = make_context()
    context.finish(success=False, exception=RuntimeError("first"))
    context.finish(success=True)
    invocation = run_of(context)["invocations"][0]
    assert invocation["executionSuccessful"] is True
    assert "toolExecutionNotifications" not in invocation


def test_rules_are_only_those_used_and_rule_index_points_at_them() -> None:
    context = make_context(verbosity=Level.NOTE)
    context.log(ERROR)
    context.log(NOTE)
    context.log(ERROR)
    run = run_of(context)
    driver_rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in driver_rules] == ["OXE0006", "OXE0010"]  # catalogue order
    for result in run["results"]:
        assert driver_rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_rule_descriptor_has_descriptions_message_strings_and_help() -> None:
    context = make_context()
    context.log(ERROR)
    (descriptor,) = run_of(context)["tool"]["driver"]["rules"]
    assert descriptor["id"] == "OXE0006"
    assert descriptor["name"] == "unsupported-op"
    assert descriptor["shortDescription"]["text"] == rules.UNSUPPORTED_OP.short_description
    assert descriptor["fullDescription"]["text"] == rules.UNSUPPORTED_OP.full_description
    assert descriptor["messageStrings"]["default"]["text"] == (
        "No ONNX function is registered for {0} (node {1} in module {2})."
    )
    assert descriptor["helpUri"] == "https://onnx-export.github.io/onnx-export/rules/OXE0006/"
    assert descriptor["defaultConfiguration"] == {"level": "error"}


def test_rules_outside_the_catalogue_are_listed_after_it() -> None:
    custom = dataclasses.replace(rules.UNSUPPORTED_OP, id="XMP0001", name="custom")
    context = make_context()
    context.log(Diagnostic(custom, Level.ERROR, "custom"))
    context.log(ERROR)
    run = run_of(context)
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["OXE0006", "XMP0001"]
    assert [r["ruleIndex"] for r in run["results"]] == [1, 0]


@pytest.mark.parametrize(
    ("level", "kind", "sarif_level"),
    [
        (Level.ERROR, "fail", "error"),
        (Level.WARNING, "fail", "warning"),
        (Level.NOTE, "fail", "note"),
        (Level.NONE, "informational", "none"),
    ],
    ids=["error", "warning", "note", "none"],
)
def test_kind_and_level_are_consistent(level: Level, kind: str, sarif_level: str) -> None:
    # SARIF 3.27.10: a result whose kind is not "fail" must have level "none".
    context = make_context(verbosity=Level.NONE)
    context.log(Diagnostic(rules.LOG_RECORD, level, "message"))
    (result,) = run_of(context)["results"]
    assert (result["kind"], result["level"]) == (kind, sarif_level)


def test_message_is_a_message_object_with_optional_markdown() -> None:
    context = make_context()
    unsupported_op(context, markdown="No ONNX function for `aten::foo`.")
    context.log(WARNING)
    first, second = run_of(context)["results"]
    assert first["message"] == {
        "text": "No ONNX function is registered for aten::foo (node foo_1 in module net).",
        "markdown": "No ONNX function for `aten::foo`.",
    }
    assert second["message"] == {"text": "Fell back."}


def test_paths_under_source_root_are_relative_to_srcroot(tmp_path: Path) -> None:
    context = DiagnosticContext("t", "1", source_root=tmp_path)
    inside = tmp_path / "pkg" / "my model.py"
    unsupported_op(context, locations=[Location(str(inside), line=3)])
    run = run_of(context)
    location = run["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "pkg/my%20model.py"
    assert location["artifactLocation"]["uriBaseId"] == "SRCROOT"
    base = run["originalUriBaseIds"]["SRCROOT"]["uri"]
    assert base == tmp_path.as_uri() + "/"


def test_paths_outside_source_root_are_absolute_file_uris(tmp_path: Path) -> None:
    context = DiagnosticContext("t", "1", source_root=tmp_path / "project")
    outside = tmp_path / "elsewhere.py"
    unsupported_op(context, locations=[Location(str(outside), line=3)])
    run = run_of(context)
    artifact_location = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact_location["uri"] == outside.as_uri()
    assert "uriBaseId" not in artifact_location
    assert "originalUriBaseIds" not in run  # SRCROOT declared only when used


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("https://example.com/model.py", "https://example.com/model.py"),
        ("<eval_with_key>.3", "%3Ceval_with_key%3E.3"),
    ],
    ids=["uri-kept", "pseudo-file-encoded"],
)
def test_uris_and_pseudo_files(uri: str, expected: str) -> None:
    context = make_context()
    unsupported_op(context, locations=[Location(uri, line=1)])
    result = run_of(context)["results"][0]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == expected


@pytest.mark.parametrize(
    ("location", "region"),
    [
        (
            Location("/m.py", 12, 5, "y = f(x)"),
            {"startLine": 12, "startColumn": 5, "snippet": {"text": "y = f(x)"}},
        ),
        (Location("/m.py", 12), {"startLine": 12}),
        (Location("/m.py", 0, 3), None),
        (Location("/m.py", None, 3, "y = f(x)"), None),
        (Location("/m.py", 7, 0), {"startLine": 7}),
    ],
    ids=["full", "line-only", "line-zero-omitted", "no-line-no-region", "column-zero-omitted"],
)
def test_region_omits_unknown_fields(location: Location, region: dict[str, object] | None) -> None:
    context = make_context()
    unsupported_op(context, locations=[location])
    physical = run_of(context)["results"][0]["locations"][0]["physicalLocation"]
    assert physical.get("region") == region


def test_location_without_uri_keeps_message_and_function() -> None:
    context = make_context()
    unsupported_op(context, locations=[Location("", message="in the graph", function="forward")])
    (location,) = run_of(context)["results"][0]["locations"]
    assert location == {
        "logicalLocations": [{"name": "forward", "kind": "function"}],
        "message": {"text": "in the graph"},
    }


def test_related_locations_have_ids_and_messages() -> None:
    context = make_context()
    related = [
        Location("/m/model.py", 3, message="Defined here"),
        Location("/m/model.py", 9, function="forward"),
        Location("/m/other.py", 4),
    ]
    unsupported_op(context, related_locations=related)
    result = run_of(context)["results"][0]
    assert [(r["id"], r["message"]["text"]) for r in result["relatedLocations"]] == [
        (1, "Defined here"),
        (2, "In forward"),
        (3, "other.py:4"),
    ]


def test_stacks_are_written_innermost_first() -> None:
    outer = Location("/m/train.py", 40, function="main")
    inner = Location("/m/model.py", 12, function="forward")
    context = make_context()
    unsupported_op(context, stacks=[Stack((outer, inner), message="Call stack")])
    (stack,) = run_of(context)["results"][0]["stacks"]
    assert stack["message"] == {"text": "Call stack"}
    names = [f["location"]["logicalLocations"][0]["name"] for f in stack["frames"]]
    assert names == ["forward", "main"]


def test_code_flows_are_omitted_when_empty_and_written_when_given() -> None:
    steps = [Location("/m/model.py", 3), Location("/m/model.py", 9)]
    context = make_context()
    unsupported_op(context)
    unsupported_op(context, code_flow=steps)
    without, with_flow = run_of(context)["results"]
    assert "codeFlows" not in without
    (code_flow,) = with_flow["codeFlows"]
    (thread_flow,) = code_flow["threadFlows"]
    lines = [
        s["location"]["physicalLocation"]["region"]["startLine"] for s in thread_flow["locations"]
    ]
    assert lines == [3, 9]


def test_artifacts_list_every_referenced_file_once(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("x = 1\n")
    context = DiagnosticContext("t", "1", source_root=tmp_path)
    unsupported_op(
        context,
        locations=[Location(str(model), 1)],
        related_locations=[Location("/usr/lib/python3/x.py", 2), Location(str(model), 1)],
        stacks=[Stack((Location("<string>", 1),))],
    )
    context.finish(success=False, exception=_raised(ValueError("in notification")))
    run = run_of(context)
    uris = [a["location"]["uri"] for a in run["artifacts"]]
    assert uris[:3] == ["model.py", "file:///usr/lib/python3/x.py", "%3Cstring%3E"]
    assert len(uris) == len(set(uris)) == 4  # plus this test file, from the notification's stack
    assert all(set(artifact) == {"location"} for artifact in run["artifacts"])
    for location in _all_artifact_locations(run):
        assert run["artifacts"][location["index"]]["location"]["uri"] == location["uri"]


def test_properties_become_a_json_safe_property_bag() -> None:
    context = make_context()
    properties = {
        "count": 3,
        "ratio": float("nan"),
        "ops": ("aten::a", "aten::b"),
        "dtypes": {"float32", "bfloat16"},
        "level": Level.NOTE,
        "path": Path("/m/x.onnx"),
        "tags": ["slow", "slow", "cpu"],
    }
    unsupported_op(context, properties=properties)
    bag = run_of(context)["results"][0]["properties"]
    assert bag == {
        "count": 3,
        "ratio": "nan",
        "ops": ["aten::a", "aten::b"],
        "dtypes": ["bfloat16", "float32"],
        "level": "note",
        "path": str(Path("/m/x.onnx")),
        "tags": ["slow", "cpu"],
    }


def test_output_is_deterministic_apart_from_times() -> None:
    def build() -> dict[str, object]:
        context = make_context(verbosity=Level.NOTE)
        unsupported_op(context, locations=[Location("/m/a.py", 1)], properties={"s": {"b", "a"}})
        context.log(NOTE)
        context.finish(success=False)
        log = context.to_sarif()
        invocation = log["runs"][0]["invocations"][0]
        invocation["startTimeUtc"] = invocation["endTimeUtc"] = "T"
        return log

    assert json.dumps(build()) == json.dumps(build())


def test_diagnostic_exception_info_without_traceback_has_no_stack() -> None:
    context = make_context()
    info = ExceptionInfo("ValueError", "no traceback", None)
    unsupported_op(context, exception=info)
    assert "stacks" not in run_of(context)["results"][0]


# --- writing ----------------------------------------------------------------------------------


def test_write_sarif_creates_parents_and_returns_resolved_path(tmp_path: Path) -> None:
    context = make_context()
    unsupported_op(context)
    path = context.write_sarif(tmp_path / "a" / "b" / "report.sarif")
    assert path == (tmp_path / "a" / "b" / "report.sarif").resolve()
    log = json.loads(path.read_text(encoding="utf-8"))
    assert_valid_sarif(log)
    assert log["runs"][0]["results"][0]["ruleId"] == "OXE0006"
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.sarif"]  # no temp files left


def test_write_sarif_replaces_an_existing_report(tmp_path: Path) -> None:
    target = tmp_path / "report.sarif"
    target.write_text("old")
    make_context().write_sarif(target)
    assert json.loads(target.read_text())["version"] == "2.1.0"


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="needs POSIX permissions")
def test_write_sarif_to_unwritable_folder_raises_a_clear_oserror(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(SarifWriteError, match=r"Could not write the SARIF report to .*locked"):
            make_context().write_sarif(locked / "report.sarif")
    finally:
        locked.chmod(stat.S_IRWXU)


def test_write_sarif_error_is_an_oserror_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    with pytest.raises(OSError, match=r"Could not write the SARIF report to .*file.*report\.sarif"):
        make_context().write_sarif(blocker / "report.sarif")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# --- helpers ------------------------------------------------------------------------------------


def _raised(error: Exception) -> Exception:
    try:
        raise error
    except Exception as caught:
        return caught


def _all_artifact_locations(value: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(value, dict):
        if "artifactLocation" in value:
            found.append(value["artifactLocation"])
        for item in value.values():
            found.extend(_all_artifact_locations(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_all_artifact_locations(item))
    return found


# --- Diagnostic as data -------------------------------------------------------------------------


def test_diagnostic_properties_are_a_read_only_copy() -> None:
    source = {"count": 1}
    diagnostic = Diagnostic(rules.DECOMPOSITION, Level.NOTE, "m", properties=source)
    source["count"] = 2
    assert diagnostic.properties == {"count": 1}
    with pytest.raises(TypeError, match="read-only"):
        diagnostic.properties["count"] = 3
    with pytest.raises(TypeError, match="read-only"):
        diagnostic.properties.update(count=3)


def test_diagnostic_pickles_and_converts_to_plain_data() -> None:
    diagnostic = Diagnostic(
        rules.DECOMPOSITION,
        Level.NOTE,
        "m",
        locations=[Location("/m.py", 1)],  # lists are stored as tuples
        properties={"ops": ["aten::a"]},
    )
    assert diagnostic.locations == (Location("/m.py", 1),)
    assert pickle.loads(pickle.dumps(diagnostic)) == diagnostic
    assert json.loads(json.dumps(dataclasses.asdict(diagnostic)["properties"])) == {
        "ops": ["aten::a"]
    }
    assert hash(diagnostic) == hash(dataclasses.replace(diagnostic))
