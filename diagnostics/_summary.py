"""A summary of a SARIF log, and the ``python -m onnx_export.diagnostics`` command."""

from __future__ import annotations

import argparse
import re
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence

from ._errors import SarifFormatError
from .sarif import load_sarif

__all__ = ["main", "summarize"]

_LEVEL_ORDER = ("error", "warning", "note")
_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def summarize(sarif_log: Mapping[str, object]) -> str:
    """Summarizes a SARIF log for people: results grouped by rule and level, then counts.

    Each result reads ``path:line:col: level: message``. Groups are ordered errors first.
    Results whose kind is ``informational`` (level ``none``) count as notes. Works on logs
    written by other tools: missing keys are skipped rather than fatal.

    Args:
        sarif_log: A SARIF log as loaded from JSON, e.g. by :func:`load_sarif`.

    Example:
        >>> from onnx_export.diagnostics import DiagnosticContext, Location, rules
        >>> context = DiagnosticContext("onnx-export", "0.1.0")
        >>> _ = context.emit(
        ...     rules.INPUT_MISMATCH,
        ...     message_args={"detail": "3 inputs"},
        ...     locations=[Location("/m/run.py", line=7, column=5)],
        ... )
        >>> context.finish(success=False)
        >>> print(summarize(context.to_sarif()))
        onnx-export 0.1.0: failed
        <BLANKLINE>
        OXE0019 input-mismatch: 1 error
          /m/run.py:7:5: error: The inputs do not match what the model was exported with: 3 inputs
        <BLANKLINE>
        1 error, 0 warnings, 0 notes
    """
    counts: dict[str, int] = {}
    blocks: list[str] = []
    for run in _maps(sarif_log.get("runs")):
        blocks.append(_summarize_run(run, counts))
    if not blocks:
        blocks.append("The log has no runs.")
    blocks.append(_format_counts(counts))
    return "\n\n".join(blocks)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Prints the summary of a SARIF report; the ``python -m onnx_export.diagnostics`` command.

    Args:
        argv: The arguments (default ``sys.argv[1:]``): the path of one SARIF file.
        prog: The program name shown in usage and error messages.

    Returns:
        1 if the report has error-level results, 0 if not, 2 if it cannot be read (the
        reason goes to stderr) or the arguments are wrong.

    Example:
        >>> main(["/no/such/report.sarif"])  # prints the reason to stderr
        2
    """
    parser = argparse.ArgumentParser(
        prog=prog or "python -m onnx_export.diagnostics",
        description="Summarize a SARIF report: results grouped by rule and level.",
    )
    parser.add_argument("report", help="path of a SARIF 2.1.0 file")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # --help or a usage error
        return exit_request.code if isinstance(exit_request.code, int) else 2
    try:
        log = load_sarif(args.report)
    except SarifFormatError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        reason = error.strerror or error
        print(f"{parser.prog}: error: cannot read '{args.report}': {reason}", file=sys.stderr)
        return 2
    print(summarize(log))
    return 1 if _count_levels(log).get("error", 0) else 0


def _count_levels(sarif_log: Mapping[str, object]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for run in _maps(sarif_log.get("runs")):
        _summarize_run(run, counts)
    return counts


def _summarize_run(run: Mapping[str, object], counts: dict[str, int]) -> str:
    rules = _rules_of(run)
    groups: dict[tuple[str, str], list[str]] = {}
    for result in _maps(run.get("results")):
        rule_id, descriptor = _rule_of(result, rules)
        label = _label(result, descriptor)
        counts[label] = counts.get(label, 0) + 1
        name = _str(descriptor.get("name")) if descriptor else None
        heading = f"{rule_id} {name}" if name else rule_id
        line = f"{_where(result, run)}{label}: {_message_text(result, descriptor)}"
        groups.setdefault((heading, label), []).append(line.replace("\n", "\n    "))
    ordered = sorted(groups.items(), key=lambda item: _rank(item[0][1]))
    lines = [_run_heading(run)]
    for (heading, label), entries in ordered:
        lines.append(f"\n{heading}: {_plural(len(entries), label)}")
        lines.extend(f"  {entry}" for entry in entries)
    return "\n".join(lines)


def _run_heading(run: Mapping[str, object]) -> str:
    driver = _map(_map(run.get("tool")).get("driver"))
    tool = " ".join(x for x in (_str(driver.get("name")), _str(driver.get("version"))) if x)
    lines = [tool or "unknown tool"]
    for invocation in _maps(run.get("invocations")):
        if "endTimeUtc" not in invocation:
            state = "unfinished"
        elif invocation.get("executionSuccessful") is True:
            state = "succeeded"
        else:
            state = "failed"
        lines[0] = f"{tool or 'unknown tool'}: {state}"
        for note in _maps(invocation.get("toolExecutionNotifications")):
            text = _str(_map(note.get("message")).get("text"))
            if text:
                lines.append(f"  {_str(note.get('level')) or 'note'}: {text}")
    return "\n".join(lines)


def _rules_of(run: Mapping[str, object]) -> list[Mapping[str, object]]:
    driver = _map(_map(run.get("tool")).get("driver"))
    return _maps(driver.get("rules"))


def _rule_of(
    result: Mapping[str, object], rules: list[Mapping[str, object]]
) -> tuple[str, Mapping[str, object] | None]:
    rule_id = _str(result.get("ruleId")) or _str(_map(result.get("rule")).get("id"))
    index = result.get("ruleIndex", _map(result.get("rule")).get("index"))
    descriptor = None
    if isinstance(index, int) and 0 <= index < len(rules):
        descriptor = rules[index]
    elif rule_id:
        descriptor = next((r for r in rules if r.get("id") == rule_id), None)
    if not rule_id and descriptor is not None:
        rule_id = _str(descriptor.get("id"))
    return rule_id or "(no rule)", descriptor


def _label(result: Mapping[str, object], descriptor: Mapping[str, object] | None) -> str:
    """The level to show, defaulted as in SARIF §3.27.10; informational results are notes."""
    kind = _str(result.get("kind")) or "fail"
    level = _str(result.get("level"))
    if level is None:
        if kind == "fail" and descriptor is not None:
            level = _str(_map(descriptor.get("defaultConfiguration")).get("level"))
        level = level or ("warning" if kind == "fail" else "none")
    if level != "none":
        return level
    if kind == "informational":
        return "note"
    return kind if kind != "fail" else "none"


def _message_text(result: Mapping[str, object], descriptor: Mapping[str, object] | None) -> str:
    message = _map(result.get("message"))
    text = _str(message.get("text"))
    if text is not None:
        return text
    message_id = _str(message.get("id"))
    strings = _map(descriptor.get("messageStrings")) if descriptor else {}
    template = _str(_map(strings.get(message_id or "")).get("text"))
    if template is None:
        return "(no message)"
    raw_arguments = message.get("arguments")
    arguments = [str(a) for a in raw_arguments] if isinstance(raw_arguments, list) else []

    def substitute(match: re.Match[str]) -> str:
        position = int(match.group(1))
        return arguments[position] if position < len(arguments) else match.group()

    return _PLACEHOLDER.sub(substitute, template).replace("{{", "{").replace("}}", "}")


def _where(result: Mapping[str, object], run: Mapping[str, object]) -> str:
    locations = _maps(result.get("locations"))
    if not locations:
        return ""
    physical = _map(locations[0].get("physicalLocation"))
    artifact = _map(physical.get("artifactLocation"))
    uri = _str(artifact.get("uri"))
    index = artifact.get("index")
    artifacts = _maps(run.get("artifacts"))
    if uri is None and isinstance(index, int) and 0 <= index < len(artifacts):
        uri = _str(_map(artifacts[index].get("location")).get("uri"))
    if uri is None:
        return ""
    parts = [_display_path(uri)]
    region = _map(physical.get("region"))
    for key in ("startLine", "startColumn"):
        value = region.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            break
        parts.append(str(value))
    return ":".join(parts) + ": "


def _display_path(uri: str) -> str:
    if uri.lower().startswith("file:"):
        return urllib.request.url2pathname(urllib.parse.urlsplit(uri).path)
    if "://" in uri:
        return uri
    return urllib.parse.unquote(uri)


def _format_counts(counts: Mapping[str, int]) -> str:
    labels = list(_LEVEL_ORDER) + sorted(set(counts) - set(_LEVEL_ORDER))
    return ", ".join(_plural(counts.get(label, 0), label) for label in labels)


def _plural(count: int, label: str) -> str:
    return f"{count} {label}{'' if count == 1 or label == 'none' else 's'}"


def _rank(label: str) -> int:
    return _LEVEL_ORDER.index(label) if label in _LEVEL_ORDER else len(_LEVEL_ORDER)


def _map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _maps(value: object) -> list[Mapping[str, object]]:
    """The mappings in ``value`` if it is a list (other items are skipped), else ``[]``."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
