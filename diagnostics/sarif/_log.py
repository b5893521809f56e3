"""Builds a SARIF 2.1.0 log from the state of one diagnostic run."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import os
import string
from collections.abc import Mapping, Sequence

from .._levels import Level
from .._model import Diagnostic, ExceptionInfo
from .._rules import Rule, field_root
from ._location_writer import LocationWriter
from ._types import (
    ExceptionDict,
    InvocationDict,
    NotificationDict,
    ReportingDescriptorDict,
    ResultDict,
    ResultKind,
    RunDict,
    SarifLevel,
    SarifLogDict,
)

__all__ = ["SARIF_SCHEMA_URI", "SARIF_VERSION", "RunRecord", "build_log", "format_time"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_MAX_JSON_DEPTH = 32
_FORMATTER = string.Formatter()


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """Everything one SARIF run is built from (a snapshot of a ``DiagnosticContext``)."""

    tool_name: str
    tool_version: str
    information_uri: str
    source_root: str | os.PathLike[str] | None
    catalogue: tuple[Rule, ...]
    diagnostics: tuple[Diagnostic, ...]
    start_time: datetime.datetime
    end_time: datetime.datetime | None = None
    success: bool | None = None
    failure: ExceptionInfo | None = None


def format_time(moment: datetime.datetime) -> str:
    """Formats an aware datetime as SARIF wants it: ISO 8601 in UTC with a ``Z``."""
    utc = moment.astimezone(datetime.UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_log(record: RunRecord) -> SarifLogDict:
    """Returns the SARIF log (one run) for ``record``; deterministic apart from times."""
    writer = LocationWriter(record.source_root)
    rules = _used_rules(record.catalogue, record.diagnostics)
    rule_index = {rule.id: index for index, rule in enumerate(rules)}
    results = [_result(d, rule_index[d.rule.id], writer) for d in record.diagnostics]
    invocation = _invocation(record, writer)
    run: RunDict = {
        "tool": {
            "driver": {
                "name": record.tool_name,
                "version": record.tool_version,
                "informationUri": record.information_uri,
                "rules": [_reporting_descriptor(rule) for rule in rules],
            }
        },
        "invocations": [invocation],
        "results": results,
        "columnKind": "unicodeCodePoints",
    }
    base_ids = writer.uris.original_uri_base_ids()
    if base_ids:
        run["originalUriBaseIds"] = base_ids
    artifacts = writer.artifacts
    if artifacts:
        run["artifacts"] = artifacts
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def _used_rules(catalogue: Sequence[Rule], diagnostics: Sequence[Diagnostic]) -> list[Rule]:
    """The rules of ``onnx_export.diagnostics``: catalogue order first, then others by first use."""
    used_ids = {d.rule.id for d in diagnostics}
    rules = [rule for rule in catalogue if rule.id in used_ids]
    known = {rule.id for rule in rules}
    for diagnostic in diagnostics:
        if diagnostic.rule.id not in known:
            known.add(diagnostic.rule.id)
            rules.append(diagnostic.rule)
    return rules


def _reporting_descriptor(rule: Rule) -> ReportingDescriptorDict:
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.short_description},
        "fullDescription": {"text": rule.full_description},
        "messageStrings": {"default": {"text": positional_template(rule)}},
        "helpUri": rule.help_uri,
        "defaultConfiguration": {"level": _sarif_level(rule.default_level)},
    }


def positional_template(rule: Rule) -> str:
    """The rule's template in SARIF placeholder syntax: ``{op}`` becomes ``{0}`` and so on.

    Placeholders are numbered by :attr:`Rule.fields`; format specs are dropped and literal
    braces stay doubled, as SARIF requires.
    """
    fields = rule.fields
    pieces: list[str] = []
    for literal, field_name, _, _ in _FORMATTER.parse(rule.message_template):
        pieces.append(literal.replace("{", "{{").replace("}", "}}"))
        if field_name is not None:
            pieces.append(f"{{{fields.index(field_root(field_name))}}}")
    return "".join(pieces)


def _kind_and_level(level: Level) -> tuple[ResultKind, SarifLevel]:
    """Errors, warnings and notes as results of kind "fail" with their level; ``Level.NONE``
    as "informational" (SARIF §3.27.10: a result whose kind is not "fail" has level "none").

    A note is a result worth reading (a fallback taken, a pass that changed the model):
    level "note", as SARIF viewers and sarif-tools count it, not "none".
    """  # noqa: D205 - the summary is the first sentence
    if level >= Level.NOTE:
        return "fail", _sarif_level(level)
    return "informational", "none"


def _sarif_level(level: Level) -> SarifLevel:
    return level.value  # Level's values are the SARIF level names


def _result(diagnostic: Diagnostic, rule_index: int, writer: LocationWriter) -> ResultDict:
    kind, level = _kind_and_level(diagnostic.level)
    result: ResultDict = {
        "ruleId": diagnostic.rule.id,
        "ruleIndex": rule_index,
        "kind": kind,
        "level": level,
        "message": {"text": diagnostic.message},
    }
    if diagnostic.markdown is not None:
        result["message"]["markdown"] = diagnostic.markdown
    if diagnostic.locations:
        result["locations"] = [writer.location(loc) for loc in diagnostic.locations]
    if diagnostic.related_locations:
        result["relatedLocations"] = [
            writer.location(loc, location_id=number, default_message=True)
            for number, loc in enumerate(diagnostic.related_locations, start=1)
        ]
    stacks = [writer.stack(stack) for stack in diagnostic.stacks]
    if diagnostic.exception is not None:
        stacks.extend(writer.exception_stacks(diagnostic.exception))
    if stacks:
        result["stacks"] = stacks
    if diagnostic.code_flow:
        result["codeFlows"] = [writer.code_flow(diagnostic.code_flow)]
    if diagnostic.properties:
        result["properties"] = _property_bag(diagnostic.properties)
    return result


def _invocation(record: RunRecord, writer: LocationWriter) -> InvocationDict:
    if record.success is None:
        successful = not any(d.level is Level.ERROR for d in record.diagnostics)
    else:
        successful = record.success
    invocation: InvocationDict = {
        "executionSuccessful": successful,
        "startTimeUtc": format_time(record.start_time),
    }
    if record.end_time is not None:
        invocation["endTimeUtc"] = format_time(record.end_time)
    if record.failure is not None:
        notification: NotificationDict = {
            "level": "error",
            "message": {"text": str(record.failure)},
            "exception": _exception(record.failure, writer),
        }
        if record.end_time is not None:
            notification["timeUtc"] = format_time(record.end_time)
        invocation["toolExecutionNotifications"] = [notification]
    return invocation


def _exception(info: ExceptionInfo, writer: LocationWriter) -> ExceptionDict:
    result: ExceptionDict = {"kind": info.type_name, "message": info.message}
    if info.stack is not None:
        result["stack"] = writer.stack(info.stack)
    if info.cause is not None:
        result["innerExceptions"] = [_exception(info.cause, writer)]
    return result


def _property_bag(properties: Mapping[str, object]) -> dict[str, object]:
    bag = {str(key): json_safe(value) for key, value in properties.items()}
    if "tags" in bag:  # SARIF reserves "tags": an array of distinct strings
        tags = bag["tags"] if isinstance(bag["tags"], list) else [bag["tags"]]
        bag["tags"] = list(dict.fromkeys(str(tag) for tag in tags))
    return bag


def json_safe(value: object, depth: int = 0) -> object:
    """Returns ``value`` as deterministic JSON data; anything else becomes its ``str()``."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth < _MAX_JSON_DEPTH:
        if isinstance(value, Mapping):
            return {str(key): json_safe(item, depth + 1) for key, item in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            items = [json_safe(item, depth + 1) for item in value]
            is_set = isinstance(value, set | frozenset)
            return sorted(items, key=repr) if is_set else items  # sets: a stable order
    return str(value)
