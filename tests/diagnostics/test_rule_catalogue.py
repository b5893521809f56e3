"""The rule catalogue: stable ids, documented fields, one documentation page per rule."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from onnx_export.diagnostics import ALL_RULES, Level, Rule, get_rule, rules

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"

# The committed catalogue. Ids are stable: append new rules; never renumber, rename or reuse.
COMMITTED_RULES = (
    ("OXE0001", "capture-attempt-failed", Level.ERROR),
    ("OXE0002", "capture-succeeded", Level.NOTE),
    ("OXE0003", "decomposition", Level.NOTE),
    ("OXE0004", "dispatch-decision", Level.NOTE),
    ("OXE0005", "dispatch-fallback", Level.WARNING),
    ("OXE0006", "unsupported-op", Level.ERROR),
    ("OXE0007", "conversion-failed", Level.ERROR),
    ("OXE0008", "optimizer-pass", Level.NOTE),
    ("OXE0009", "optimization-failed", Level.ERROR),
    ("OXE0010", "model-saved", Level.NOTE),
    ("OXE0011", "serialization-failed", Level.ERROR),
    ("OXE0012", "verification-result", Level.NOTE),
    ("OXE0013", "verification-mismatch", Level.ERROR),
    ("OXE0014", "python-warning", Level.WARNING),
    ("OXE0015", "log-record", Level.NOTE),
    ("OXE0016", "buffer-mutation", Level.NOTE),
    ("OXE0017", "unsupported-higher-order-op", Level.ERROR),
    ("OXE0018", "export-failed", Level.ERROR),
    ("OXE0019", "input-mismatch", Level.ERROR),
    ("OXE0020", "dynamic-shape-fixed", Level.WARNING),
    ("OXE0021", "stage-times", Level.NOTE),
    ("OXE0022", "parity-mismatch", Level.WARNING),
    ("OXE0023", "parity-skipped", Level.NOTE),
    ("OXE0024", "invalid-graph", Level.ERROR),
    ("OXE0025", "training-mode", Level.WARNING),
    ("OXE0026", "capture-patches", Level.NOTE),
    ("OXE0027", "capture-patch-skipped", Level.NOTE),
)

# The fields the exporter passes for each rule.
EXPECTED_FIELDS = {
    "OXE0001": {"strategy", "exception_type", "exception_message"},
    "OXE0002": {"strategy", "seconds"},
    "OXE0003": {"count", "ops"},
    "OXE0004": {"op", "function", "reason"},
    "OXE0005": {"op", "function", "reason"},
    "OXE0006": {"op", "node", "module"},
    "OXE0007": {"op", "node", "function", "exception_message"},
    "OXE0008": {"pass_name", "nodes_before", "nodes_after"},
    "OXE0009": {"exception_message"},
    "OXE0010": {"path", "size"},
    "OXE0011": {"path", "exception_message"},
    "OXE0012": {"output", "max_abs_error", "max_rel_error"},
    "OXE0013": {"node", "op", "function", "max_abs_error", "max_rel_error"},
    "OXE0014": {"category", "message"},
    "OXE0015": {"logger", "message"},
    "OXE0016": {"buffer"},
    "OXE0017": {"op", "node"},
    "OXE0018": {"stage", "exception_message"},
    "OXE0019": {"detail"},
    "OXE0020": {"dim", "change", "reason"},
    "OXE0021": {"total", "stages"},
    "OXE0022": {"reference", "outputs", "cause"},
    "OXE0023": {"reason"},
    "OXE0024": {"node", "op", "reason"},
    "OXE0025": {"modules"},
    "OXE0026": {"count", "patches"},
    "OXE0027": {"patch", "reason"},
}

RULE_IDS = [rule.id for rule in ALL_RULES]


def test_catalogue_matches_the_committed_ids_names_and_levels() -> None:
    assert [(r.id, r.name, r.default_level) for r in ALL_RULES] == list(COMMITTED_RULES)


def test_ids_and_names_are_unique() -> None:
    assert len(set(RULE_IDS)) == len(RULE_IDS)
    assert len({rule.name for rule in ALL_RULES}) == len(ALL_RULES)


def test_every_rule_is_a_module_constant_named_after_it() -> None:
    for rule in ALL_RULES:
        constant = rule.name.upper().replace("-", "_")
        assert getattr(rules, constant) is rule


@pytest.mark.parametrize("rule", ALL_RULES, ids=RULE_IDS)
def test_rule_shape(rule: Rule) -> None:
    assert re.fullmatch(r"OXE\d{4}", rule.id)
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name)
    assert rule.help_uri == f"{rules.DOCS_BASE_URI}/rules/{rule.id}/"
    assert rule.short_description.endswith(".")
    assert set(rule.fields) == EXPECTED_FIELDS[rule.id]


@pytest.mark.parametrize("rule", ALL_RULES, ids=RULE_IDS)
def test_full_description_documents_every_field(rule: Rule) -> None:
    for field in rule.fields:
        assert re.search(rf"\b{field}\b", rule.full_description), (
            f"{rule.id}: field {field!r} is not described in full_description"
        )


@pytest.mark.parametrize("rule", ALL_RULES, ids=RULE_IDS)
def test_message_formats_with_its_fields(rule: Rule) -> None:
    message = rule.format_message(**{field: f"<{field}>" for field in rule.fields})
    for field in rule.fields:
        assert f"<{field}>" in message


@pytest.mark.parametrize("rule", ALL_RULES, ids=RULE_IDS)
def test_every_rule_has_a_documentation_page(rule: Rule) -> None:
    page = DOCS / f"{rule.id}.md"
    assert page.is_file(), f"write {page.relative_to(DOCS.parents[1])}"
    text = page.read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"# {rule.id}: {rule.name}"
    assert f"Default level: **{rule.default_level.value}**" in text
    for section in ("## What it means", "## Typical causes", "## What to do"):
        assert section in text, f"{page.name} lacks {section!r}"


def test_index_lists_every_rule_and_no_page_is_orphaned() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for rule in ALL_RULES:
        assert f"| [{rule.id}]({rule.id}.md) | {rule.name} |" in index
    pages = {path.stem for path in DOCS.glob("OXE*.md")}
    assert pages == set(RULE_IDS)


def test_get_rule_finds_rules_and_lists_known_ids_when_missing() -> None:
    assert get_rule("OXE0006") is rules.UNSUPPORTED_OP
    with pytest.raises(KeyError, match=r"'OXE9999'.*Known ids: OXE0001, OXE0002"):
        get_rule("OXE9999")


# --- the Rule type ----------------------------------------------------------------------------

EXAMPLE = dataclasses.replace(rules.UNSUPPORTED_OP, id="XMP0001")


def test_format_message_ignores_extra_arguments() -> None:
    message = EXAMPLE.format_message(op="a", node="n", module="m", unused=1)
    assert message == "No ONNX function is registered for a (node n in module m)."


def test_format_message_names_the_missing_arguments() -> None:
    with pytest.raises(KeyError) as caught:
        EXAMPLE.format_message(op="a")
    assert caught.value.args[0] == (
        "Rule XMP0001 (unsupported-op) needs message argument(s) 'node', 'module'; "
        "got 'op'. Pass them in message_args."
    )


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("unclosed {op", "malformed"),
        ("positional {0}", "is not a name"),
        ("empty {}", "is not a name"),
    ],
    ids=["unclosed", "positional", "empty"],
)
def test_bad_templates_fail_where_the_rule_is_defined(template: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        dataclasses.replace(EXAMPLE, message_template=template)


def test_template_fields_with_attributes_and_format_specs() -> None:
    rule = dataclasses.replace(EXAMPLE, message_template="{node.name} took {seconds:.1f} s {{ok}}")
    assert rule.fields == ("node", "seconds")


def test_rule_requires_id_name_and_level() -> None:
    with pytest.raises(ValueError, match="non-empty id and name"):
        dataclasses.replace(EXAMPLE, id="")
    with pytest.raises(TypeError, match="default_level must be a Level"):
        dataclasses.replace(EXAMPLE, default_level="error")


def test_levels_are_ordered() -> None:
    assert sorted([Level.ERROR, Level.NONE, Level.WARNING, Level.NOTE]) == [
        Level.NONE,
        Level.NOTE,
        Level.WARNING,
        Level.ERROR,
    ]
    assert Level.WARNING >= Level.WARNING > Level.NOTE
    with pytest.raises(TypeError):
        _ = Level.NOTE < "warning"
