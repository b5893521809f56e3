"""The documentation: its code samples run, and the site builds in strict mode.

Every ```python block of ``README.md`` and of ``docs/**/*.md`` (except ``docs/rules/``,
whose snippets are fragments of a ``forward``) runs here: one test per page, the page's
blocks in order in one namespace, in a fresh temporary folder. A block right after a
``<!-- no-test -->`` line is skipped. ``test_site_builds_in_strict_mode`` runs
``mkdocs build --strict`` (as ``.ci/run`` does) and checks that the API reference has an
entry for every public name.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import private_temp_folder  # noqa: F401  # a fixture, used below

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = PROJECT_ROOT / "docs"
NO_TEST = "<!-- no-test -->"
_FENCE = re.compile(r"^```(\w*)\s*$")

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # samples' failed exports


def pages() -> list[pathlib.Path]:
    """README.md and the documentation pages whose samples run."""
    found = sorted(p for p in DOCS.rglob("*.md") if DOCS / "rules" not in p.parents)
    return [PROJECT_ROOT / "README.md", *found]


def code_blocks(path: pathlib.Path, language: str = "python") -> list[tuple[int, str]]:
    """``(first line number, code)`` of each runnable ``language`` block in the page."""
    blocks: list[tuple[int, str]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    fence: str | None = None
    start, skip, body = 0, False, []
    previous = ""
    for number, line in enumerate(lines, 1):
        match = _FENCE.match(line)
        if fence is None and match:
            fence, start, body = match.group(1), number + 1, []
            skip = previous.strip() == NO_TEST
        elif fence is not None and line.strip() == "```":
            if fence == language and not skip:
                blocks.append((start, "\n".join(body)))
            fence = None
        elif fence is not None:
            body.append(line)
        if line.strip():
            previous = line
    return blocks


@pytest.mark.parametrize(
    "page", pages(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)).replace("/", "_")
)
def test_code_samples_run(
    page: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, object] = {"__name__": f"docs_sample_{page.stem.replace('-', '_')}"}
    for start, code in code_blocks(page):
        # Blank lines in front, so that tracebacks give the line numbers of the page.
        compiled = compile("\n" * (start - 1) + code, str(page), "exec")
        exec(compiled, namespace)


def test_block_extraction_honours_the_marker(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text\n\n```python\na = 1\n```\n\n<!-- no-test -->\n```python\nb = 2\n```\n"
        "\n```bash\nls\n```\n```python\nc = 3\n```\n"
    )
    assert code_blocks(page) == [(4, "a = 1"), (16, "c = 3")]


def test_getting_started_has_the_readme_commands() -> None:
    readme = code_blocks(PROJECT_ROOT / "README.md", "bash")[:3]
    guide = code_blocks(DOCS / "getting-started.md", "bash")[:3]
    assert [code for _, code in guide] == [code for _, code in readme]


def test_every_page_is_in_the_nav() -> None:
    """``mkdocs build --strict`` checks it too; this says which page without mkdocs."""
    config = (PROJECT_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in DOCS.rglob("*.md"):
        relative = page.relative_to(DOCS).as_posix()
        assert f" {relative}" in config, f"{relative} is not in mkdocs.yml's nav"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="mkdocs is in the 'test' extra"
)
def test_site_builds_in_strict_mode(tmp_path: pathlib.Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    pages = {"onnx_export": "onnx_export", "adapters": "onnx_export.adapters"}
    pages["diagnostics"] = "onnx_export.diagnostics"
    pages["serving"] = "onnx_export.serving"
    for page, package in pages.items():
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        missing = [
            name
            for name in importlib.import_module(package).__all__
            if f'id="{package}.{name}"' not in html
        ]
        assert not missing, f"the API reference of {package} lacks {missing}"
    assert (site / "rules" / "OXE0006" / "index.html").is_file()  # the reports' helpUri


def _rule_example(rule: str) -> str:
    """The first python block of ``docs/rules/<rule>.md``'s Example section."""
    page = DOCS / "rules" / f"{rule}.md"
    example = page.read_text(encoding="utf-8").split("## Example", 1)[1]
    return example.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_unsupported_op_example_is_still_unsupported() -> None:
    """OXE0006's example must fail as it says; when our ops cover it, pick another op."""
    import torch

    import onnx_export

    namespace: dict[str, object] = {"torch": torch}
    body = textwrap.indent(_rule_example("OXE0006"), "    ")
    exec(f"class Example(torch.nn.Module):\n{body}", namespace)
    model = namespace["Example"]()  # type: ignore[operator]
    with pytest.raises(onnx_export.UnsupportedOpsError) as caught:
        onnx_export.dynamo_export(model, torch.rand(3) + 1.5)
    op = re.search(r"OXE0006: (\S+) has no ONNX function", _rule_example("OXE0006"))
    assert op is not None and op.group(1) in str(caught.value), str(caught.value)


def test_the_capture_rule_gives_the_real_strategy_order() -> None:
    from onnx_export import ExportOptions

    order = ExportOptions().capture_strategies
    text = " ".join((DOCS / "rules" / "OXE0001.md").read_text(encoding="utf-8").split())
    assert f"`{order!r}`".replace("'", '"') in text, order
    first, second = (s.replace("_", "-") for s in order[:2])
    assert text.index(f"{first} `torch.export`") < text.index(f"{second} `torch.export`")


def test_the_cli_page_states_what_the_cli_prints(capfd: pytest.CaptureFixture[str]) -> None:
    from onnx_export.cli import main

    text = " ".join((DOCS / "cli.md").read_text(encoding="utf-8").split())
    assert main(["info", "-v", "nope.onnx"]) == 2
    assert main(["-v", "info", "nope.onnx"]) == 2
    assert main(["bogus"]) == 2
    assert main(["exprot"]) == 2
    lines = capfd.readouterr().err.splitlines()
    assert [line.split(" error:")[0] for line in lines] == [
        "onnx-export info:",
        "onnx-export info:",
        "onnx-export:",
        "onnx-export:",
    ], lines
    assert "`onnx-export COMMAND: error:`" in text and "`onnx-export: error:`" in text
    assert "before or after the command name" in text
    assert "did you mean 'export'?" in lines[3] and "did you mean 'export'?" in text
    assert main(["--version"]) == 0 and "`onnx-export --version`" in text


def test_the_site_uses_material_with_highlighting_and_one_row_of_tabs() -> None:
    config = (PROJECT_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^theme:\n  name: material$", config, re.MULTILINE)
    for feature in ("navigation.tabs", "pymdownx.highlight", "pymdownx.superfences"):
        assert f"- {feature}" in config, feature
    nav = config.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    tabs = re.findall(r"^  - ([^:]+):", nav, re.MULTILINE)
    # ~110 px a tab at 1280 px with the logo and the search box: seven short names fit.
    assert len(tabs) <= 7 and sum(len(t) for t in tabs) <= 60, tabs
    assert "mkdocs-material" in (PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8")
