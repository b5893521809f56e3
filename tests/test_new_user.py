"""What a new user hit on a fresh clone (install truth, the CLI's missing doors, locations,
messages), one behaviour per test; the docs' claims are checked against each other and the code.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tomllib
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import onnx_export
from onnx_export._environment import TESTED_TORCH, TORCH_INSTALL
from onnx_export.cli import main
from onnx_export.diagnostics import DiagnosticContext, DiagnosticOptions, Level
from tests.helpers import private_temp_folder

__all__ = ["private_temp_folder"]  # the fixture, used below

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = PROJECT_ROOT / "docs"
INSTALL_PAGES = ("README.md", "docs/getting-started.md", "docs/cli.md")
CPU_LINE = re.compile(r"pip install torch==\S+ --index-url [^\s`]+")


def _text(relative: str) -> str:
    return (PROJECT_ROOT / relative).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", INSTALL_PAGES)
def test_the_cpu_torch_line_is_the_same_everywhere(page: str) -> None:
    """README, getting started, the CLI page and ``doctor`` give one CPU install line."""
    lines = set(CPU_LINE.findall(_text(page).replace("\n", " ")))
    assert lines == {TORCH_INSTALL}, (page, lines)


def test_the_readme_commands_pin_the_torch_that_the_cpu_line_installs() -> None:
    """``torch==X`` in the two commands is what the CPU line installed, so pip keeps it."""
    readme = _text("README.md")
    command = re.compile(r"python -m pip install .*&&")
    commands = [line for line in readme.splitlines() if command.match(line)]
    assert len(commands) == 2
    assert all(f"torch=={TESTED_TORCH} -e '.[" in line for line in commands), commands


def test_no_page_installs_onnx_export_from_the_index() -> None:
    """onnx-export is not on PyPI: no page tells a newcomer to ``pip install onnx-export``."""
    pages = [PROJECT_ROOT / "README.md", *DOCS.rglob("*.md")]
    bare = re.compile(r"pip install\s+onnx-export(?![\w\[-])")
    offenders = [p.name for p in pages if bare.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
    # A recipe's first step installs from the clone: the extras by the index's name work
    # only once onnx-export is installed (pip then adds the extra's packages).
    first_steps = re.compile(r"^pip install ['\"]?onnx-export\[.*# 1\.", re.MULTILINE)
    assert [p.name for p in pages if first_steps.search(p.read_text(encoding="utf-8"))] == []
    assert "not on PyPI" in _text("README.md")
    assert "not on PyPI" in _text("docs/getting-started.md")
    assert "not on PyPI" in _text("docs/deployment.md")


def test_the_wheel_the_docs_name_is_the_one_pip_builds() -> None:
    """``dist/onnx_export-VERSION-py3-none-any.whl`` follows pyproject's name and version."""
    project = tomllib.loads(_text("pyproject.toml"))["project"]
    wheel = f"dist/{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"
    for page in ("README.md", "docs/getting-started.md", "docs/deployment.md"):
        names = set(re.findall(r"dist/\S+?\.whl", _text(page)))
        assert names == {wheel}, (page, names)


def test_the_readme_says_how_long_the_tests_take_and_how_to_run_the_slow_ones() -> None:
    readme = " ".join(_text("README.md").split())
    assert "about 20 minutes on a 2-core machine" in readme
    assert "python -m pytest tests/ops --runslow" in readme
    conftest = _text("tests/ops/conftest.py")
    assert '"--runslow"' in conftest and "ONNX_EXPORT_RUNSLOW" in conftest


# --- 3. the CLI takes a registry for custom ops, and a target --------------------------------

MODELS = """
import torch


@torch.library.custom_op("newuser_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor) -> torch.Tensor:
    return 2.0 * torch.sin(x)


@scaled_sin.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return scaled_sin(x) + 1.0


def custom_op():
    return UsesCustomOp(), (torch.randn(2, 3),)


def linear():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU()), (torch.randn(2, 4),)
"""

OPS = """
import onnx_export
from onnxscript import opset18 as op


def scaled_sin(x):
    return op.Mul(op.Sin(x), op.CastLike(op.Constant(value_float=2.0), x))


def make_registry():
    registry = onnx_export.OnnxRegistry()
    registry.register_op("newuser_test::scaled_sin", scaled_sin)
    return registry


REGISTRY = make_registry()
NOT_A_REGISTRY = 3
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("new_user")
    (folder / "nu_models.py").write_text(MODELS)
    (folder / "nu_ops.py").write_text(OPS)
    return folder


@pytest.fixture
def work(models: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.chdir(models)
    monkeypatch.syspath_prepend(str(models))
    return models


def _eager_and_ort(path: pathlib.Path, factory: str) -> tuple[Any, Any]:
    import nu_models  # type: ignore[import-not-found]  # written by the fixture

    model, args = getattr(nu_models, factory)()
    return model(*args), onnx_export.load(path)(*args)


@pytest.mark.parametrize("registry", ["nu_ops:make_registry", "nu_ops.py:REGISTRY"])
def test_export_takes_a_registry_for_custom_ops(
    work: pathlib.Path, registry: str, capfd: pytest.CaptureFixture[str]
) -> None:
    out = work / f"custom_{registry.split(':')[1]}.onnx"
    argv = ["export", "nu_models:custom_op", "-o", str(out), "--registry", registry]
    assert main(argv) == 0, capfd.readouterr().err
    expected, got = _eager_and_ort(out, "custom_op")
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_without_the_registry_the_error_names_the_option(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "nu_models:custom_op", "-o", str(work / "no.onnx")]) == 1
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "--registry MODULE:NAME" in err, err


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("nu_ops:NOT_A_REGISTRY", "expected an onnx_export.OnnxRegistry"),
        ("nu_ops:nope", "has no attribute 'nope'"),
        ("no_such_ops:make_registry", "no module named 'no_such_ops'"),
        ("missing_ops.py:registry", "--registry missing_ops.py:registry: 'missing_ops.py' is"),
        ("nu_ops", "--registry nu_ops: expected MODULE:NAME (e.g. my_ops.py:make_registry"),
    ],
)
def test_a_bad_registry_is_a_usage_error(
    work: pathlib.Path, registry: str, message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "nu_models:linear", "-o", str(work / "bad.onnx"), "--registry", registry]
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (work / "bad.onnx").exists()


def test_export_takes_a_target(work: pathlib.Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = work / "fused.onnx"
    argv = ["export", "nu_models:linear", "-o", str(out), "--target", "onnxruntime"]
    assert main(argv) == 0, capfd.readouterr().err
    model = onnx.load(out)
    assert "com.microsoft" in {o.domain for o in model.opset_import}
    expected, got = _eager_and_ort(out, "linear")
    np.testing.assert_allclose(
        got.detach().numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-5
    )


# --- 4. SARIF locations are the user's lines -----------------------------------------------


class _Reshaper(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        return y.reshape(4, -1)  # fixes the dynamic batch to 4


class _Recurrent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.gru = torch.nn.GRU(16, 8, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        z, _ = self.gru(y)
        return z


def _line_of(text: str) -> int:
    lines = pathlib.Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _notes() -> onnx_export.ExportOptions:
    return onnx_export.ExportOptions(diagnostic_options=DiagnosticOptions(verbosity=Level.NOTE))


def test_a_dimension_fixed_by_the_model_is_located_at_that_line() -> None:
    options = onnx_export.ExportOptions(
        dynamic_shapes={"x": {0: "batch"}},
        diagnostic_options=DiagnosticOptions(write_report="never"),
    )
    with pytest.raises(onnx_export.OnnxExportError) as caught:
        onnx_export.dynamo_export(_Reshaper(), torch.randn(4, 6), export_options=options)
    context = caught.value.diagnostic_context
    assert context is not None
    errors = list(context.errors())
    assert {d.rule.id for d in errors} >= {"OXE0001", "OXE0018"}
    reshape = _line_of("return y.reshape(4, -1)")
    for diagnostic in errors:
        assert [(pathlib.Path(loc.uri).name, loc.line) for loc in diagnostic.locations] == [
            ("test_new_user.py", reshape)
        ], diagnostic


def test_every_location_of_a_recurrent_export_is_the_users() -> None:
    """Our LSTM/GRU rewrites, contextlib and our own program code are no user's lines."""
    model, x = _Recurrent().eval(), torch.randn(2, 5, 8)
    program = onnx_export.dynamo_export(model, x, export_options=_notes())
    with torch.no_grad():
        np.testing.assert_allclose(program(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    diagnostics = program.diagnostic_context.diagnostics
    paths = {loc.uri for d in diagnostics for loc in d.locations}
    assert paths == {__file__}, paths
    lines = {loc.line for d in diagnostics if d.rule.id == "OXE0004" for loc in d.locations}
    assert lines == {_line_of("y, _ = self.lstm(x)"), _line_of("z, _ = self.gru(y)")}
    assert not any("children_specs" in d.message for d in diagnostics)


def test_a_warning_raised_in_a_library_is_located_at_the_users_line(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "site"
    library.mkdir()
    (library / "newuser_lib.py").write_text(
        "import warnings\n\ndef deprecated():\n    warnings.warn('old API', FutureWarning)\n"
    )
    monkeypatch.syspath_prepend(str(library))
    import newuser_lib  # type: ignore[import-not-found]  # written just above

    context = DiagnosticContext("t", "0", DiagnosticOptions(verbosity=Level.NOTE))
    with context.record_python_warnings(library_paths=(str(library) + os.sep,)):
        newuser_lib.deprecated()  # the user's line
    (diagnostic,) = context.diagnostics
    assert diagnostic.level is Level.NOTE
    assert [(loc.uri, loc.line) for loc in diagnostic.locations] == [
        (__file__, _line_of("newuser_lib.deprecated()  # the user's line"))
    ]
    assert diagnostic.properties["raisedAt"].endswith("newuser_lib.py:4")


# --- 5. no warnings nobody can act on -------------------------------------------------------


@pytest.mark.parametrize("kind", ["recurrent", "transformer_encoder"])
def test_plain_layers_export_without_fallback_warnings_or_empty_notes(kind: str) -> None:
    torch.manual_seed(0)
    if kind == "recurrent":
        model, x = _Recurrent().eval(), torch.randn(2, 5, 8)
    else:
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        model, x = torch.nn.TransformerEncoder(layer, 2).eval(), torch.randn(2, 5, 16)
    program = onnx_export.dynamo_export(model, x, export_options=_notes())
    with torch.no_grad():
        np.testing.assert_allclose(program(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    rules = [d.rule.id for d in program.diagnostic_context.diagnostics]
    assert "OXE0005" not in rules  # aten::zeros(dtype=...) matches torchlib's exactly
    assert "OXE0003" not in rules  # nothing was decomposed: no "Decomposed 0 operator(s)"
    assert not [d for d in program.diagnostic_context.diagnostics if d.level >= Level.WARNING]


# --- 6. torch.onnx habits get errors that name them ----------------------------------------


class _Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).relu()


_QUIET = onnx_export.ExportOptions(diagnostic_options=DiagnosticOptions(write_report="never"))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "first_words"),
    [
        pytest.param(
            "tuple",
            {},
            "CaptureError",
            "The inputs came as one tuple of 1 tensor(s)",
            id="args-tuple",
        ),
        pytest.param(
            "x", {"path": "m.onnx"}, "ExportInputError", "An argument names an .onnx file", id="f"
        ),
        pytest.param(
            "x",
            {"opset_version": 17},
            "ExportInputError",
            "'opset_version' is an option of torch.onnx.export",
            id="opset_version",
        ),
        pytest.param(
            "x",
            {"dynamic_axes": {"x": {0: "b"}}, "input_names": ["x"]},
            "ExportInputError",
            "'dynamic_axes', 'input_names' are options of torch.onnx.export",
            id="two-options",
        ),
    ],
)
def test_a_torch_onnx_habit_gets_an_error_that_names_it(
    args: str, kwargs: dict[str, Any], error: str, first_words: str
) -> None:
    x = torch.randn(1, 3, 8, 8)
    positional: tuple[Any, ...] = ((x,),) if args == "tuple" else (x,)
    if "path" in kwargs:
        positional, kwargs = (*positional, kwargs["path"]), {}
    with pytest.raises(onnx_export.OnnxExportError) as caught:
        onnx_export.dynamo_export(_Conv(), *positional, export_options=_QUIET, **kwargs)
    assert type(caught.value).__name__ == error
    message = str(caught.value)
    assert first_words in message.splitlines()[0], message[:500]
    spellings = ("ExportOptions(", "dynamo_export(model, x)", "program.save(path)")
    assert any(s in message for s in spellings), message[:500]


def test_the_same_model_exports_when_called_as_it_is_called() -> None:
    model, x = _Conv().eval(), torch.randn(1, 3, 8, 8)
    program = onnx_export.dynamo_export(model, x, export_options=_QUIET)
    with torch.no_grad():
        np.testing.assert_allclose(program(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_a_model_whose_forward_takes_a_tuple_still_exports() -> None:
    """A tuple is a habit only when the capture fails: a forward that takes one is served."""

    class Pair(torch.nn.Module):
        def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            return pair[0] * pair[1]

    pair = (torch.randn(2, 3), torch.randn(2, 3))
    program = onnx_export.dynamo_export(Pair(), pair, export_options=_QUIET)
    np.testing.assert_allclose(program(pair).numpy(), (pair[0] * pair[1]).numpy(), rtol=1e-6)


# --- 7. every command is in the CLI page's table and the README's list ----------------------


def _commands() -> set[str]:
    import argparse

    from onnx_export.cli import _parser

    parser = _parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    # an alias maps to the same parser as its command: keep the first name of each
    names: dict[int, str] = {}
    for name, sub in action.choices.items():
        names.setdefault(id(sub), name)
    return set(names.values())


def test_every_command_is_in_the_cli_table_and_the_readme() -> None:
    table = set(re.findall(r"^\| \[`([a-z-]+)`\]\(#", _text("docs/cli.md"), re.MULTILINE))
    readme = set(re.findall(r"^onnx-export ([a-z-]+) ", _text("README.md"), re.MULTILINE))
    commands = _commands()
    assert commands - table == set(), "commands missing from docs/cli.md's table"
    assert commands - readme - {"demo"} == set(), "commands missing from the README's list"


def _documented_command_lines() -> list[tuple[str, str]]:
    """``(page:line, command)`` for each complete ``onnx-export ...`` line of a shell block.

    Synopses (``[--opt X]``, ``a|b``, ``...``, ``<x>``) are left out: they are not commands.
    """
    from tests.test_docs import code_blocks, pages

    found = []
    for page in pages():
        for language in ("bash", "sh", "console", "text", ""):
            for start, code in code_blocks(page, language):
                for offset, raw in enumerate(code.replace("\\\n", " ").splitlines()):
                    line = re.sub(r"\s+#.*$", "", raw.strip().removeprefix("$ "))
                    if line.startswith("onnx-export ") and not re.search(r"[\[|<]|\.\.\.", line):
                        found.append((f"{page.name}:{start + offset}", line))
    return found


def test_every_documented_command_line_parses() -> None:
    """A command copied from the docs is accepted by the parser as written (its options and
    required arguments), as a new user copies it."""
    import contextlib
    import io
    import shlex

    from onnx_export.cli import _parser

    lines = _documented_command_lines()
    assert len(lines) > 20, lines
    refused = []
    for where, line in lines:
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                _parser().parse_args(shlex.split(line)[1:])
        except SystemExit as e:
            if e.code:
                refused.append(f"{where}: {line}: {stderr.getvalue().strip()}")
    assert refused == []


def test_no_dockerfile_installs_onnx_export_from_the_index() -> None:
    """onnx-export is not on PyPI: an image installs the wheel built in the clone."""
    from tests.test_docs import code_blocks, pages

    index = re.compile(r"pip install[^\n]*['\"\s]onnx-export\[")
    offenders = [
        f"{page.name}:{start}"
        for page in pages()
        for start, code in code_blocks(page, "dockerfile")
        if index.search(code)
    ]
    assert offenders == []


# --- 8. output paths are checked before any work --------------------------------------------

_NO_FILES_HERE = "/proc"  # root passes os.access there, yet no file can be created
needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")


@needs_proc
@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["-o", f"{_NO_FILES_HERE}/x.onnx"], "-o/--output"),
        (["-o", "ok.onnx", "--report", f"{_NO_FILES_HERE}/r.sarif"], "--report"),
    ],
)
def test_export_refuses_an_output_where_no_file_can_be_created(
    work: pathlib.Path, extra: list[str], option: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "nu_models:linear", *extra]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and f"{option} " in err and "no file can be created" in err
    assert not (work / "ok.onnx").exists()


@needs_proc
def test_hf_refuses_a_bad_output_before_importing_torch(tmp_path: pathlib.Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    code = (
        "import sys\nfrom onnx_export.cli import main\n"
        f"rc = main(['hf', {str(tmp_path)!r}, '-o', '{_NO_FILES_HERE}/out'])\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout.strip() == "[]"  # refused before torch or transformers was imported
    assert "no file can be created" in result.stderr and result.stderr.count("\n") == 1


# --- 9. `info` counts an RNN's weights as parameters and shows a recorded None --------------


def test_info_counts_weights_the_optimizer_folded_as_parameters(
    tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    model, x = _Recurrent().eval(), torch.randn(2, 5, 8)
    program = onnx_export.dynamo_export(model, x, export_options=_QUIET)
    path = program.save(tmp_path / "rnn.onnx")
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(onnx_export.load(path)(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert main(["info", str(path)]) == 0
    out = capfd.readouterr().out
    count = sum(p.numel() for p in model.parameters())
    assert re.search(rf"^parameters: {count:,} in \d+ initializers", out, re.MULTILINE), out
    constants = re.search(r"^constants: ([\d,]+) in", out, re.MULTILINE)
    assert constants is None or int(constants.group(1).replace(",", "")) < count // 10, out


class _OptionalBias(torch.nn.Module):
    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 2.0
    ) -> torch.Tensor:
        y = x * scale
        return y if bias is None else y + bias


def test_info_shows_an_input_that_was_none_at_export(
    tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(2, 3)
    program = onnx_export.dynamo_export(
        _OptionalBias(), x, bias=None, scale=3.0, export_options=_QUIET
    )
    path = program.save(tmp_path / "optional.onnx")
    np.testing.assert_allclose(onnx_export.load(path)(x, bias=None, scale=3.0).numpy(), x * 3.0)
    assert main(["info", str(path)]) == 0
    out = capfd.readouterr().out
    assert "None at export (pass None there, or leave it out): bias" in out, out


# --- 10. small inconsistencies ---------------------------------------------------------------


def test_diagnostics_on_a_file_that_is_not_sarif_says_error(
    tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "r.sarif").write_text('{"a": 1}')
    assert main(["diagnostics", str(tmp_path / "r.sarif")]) == 2
    err = capfd.readouterr().err
    assert err.startswith("onnx-export diagnostics: error: ") and err.count("\n") == 1, err


def test_an_unknown_provider_name_is_an_error_not_a_cuda_hint(tmp_path: pathlib.Path) -> None:
    x = torch.randn(2, 3)
    path = onnx_export.dynamo_export(_OptionalBias(), x, export_options=_QUIET).save(
        tmp_path / "m.onnx"
    )
    with pytest.raises(ValueError, match=r"'cpux' is not one onnxruntime knows"):
        onnx_export.load(path, providers=["cpux"])
    model = onnx_export.load(path, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(model(x).numpy(), (x * 2.0).numpy())


def test_the_one_line_error_ends_sentences_whole_and_promises_nothing_below(
    work: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (work / "nu_fixed.py").write_text(
        "import torch\n\n\nclass Fixed(torch.nn.Module):\n    def forward(self, x):\n"
        "        return (x * 2).reshape(4, -1)\n\n\ndef fixed():\n"
        "    return Fixed(), (torch.randn(4, 6),)\n"
    )
    argv = ["export", "nu_fixed:fixed", "-o", str(work / "f.onnx"), "--dynamic", "x:0=batch"]
    assert main(argv) == 1
    err = capfd.readouterr().err
    assert err.count("\n") == 1, err
    assert "chained below" not in err and "--verbose prints torch's error" in err
    assert re.search(r"[a-z]\.\.\.", err) is None, err  # no word cut in half
    assert "nu_fixed.py:6 (return (x * 2).reshape(4, -1))" in err


def test_failed_export_reports_go_to_one_folder_that_keeps_the_newest(
    private_temp_folder: None,
) -> None:
    from onnx_export.reporting._records import KEPT_REPORTS, reports_folder

    paths = []
    for _ in range(KEPT_REPORTS + 2):
        with pytest.raises(onnx_export.OnnxExportError) as caught:
            onnx_export.dynamo_export(_Conv(), torch.randn(1, 3, 8, 8), "m.onnx")
        paths.append(caught.value.report_path)
    folder = reports_folder()
    assert folder.name == "onnx-export-reports" and all(p.parent == folder for p in paths)
    assert len(list(folder.glob("onnx-export-*.sarif"))) == KEPT_REPORTS
    assert paths[-1].is_file() and str(paths[-1]) in str(caught.value)
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


class _TwoInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + y


def test_torch_onnx_export_call_is_refused_even_where_it_would_bind() -> None:
    """``(x, y), "m.onnx"`` binds to forward(x, y); the path still names the habit first."""
    x, y = torch.randn(2, 4), torch.randn(2, 2)
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(_TwoInputs(), (x, y), "m.onnx", export_options=_QUIET)
    message = str(caught.value)
    assert message.startswith("An argument names an .onnx file"), message
    assert "dynamo_export(model, x0, x1)" in message and "(x0, x1,)" not in message
    model = _TwoInputs().eval()
    program = onnx_export.dynamo_export(model, x, y, export_options=_QUIET)
    with torch.no_grad():
        np.testing.assert_allclose(program(x, y).numpy(), model(x, y).numpy(), rtol=1e-5)


def test_the_torch_onnx_page_quotes_the_errors_as_they_are() -> None:
    page = " ".join(_text("docs/from-torch-onnx.md").split()).replace("`", "")
    x = torch.randn(1, 3, 8, 8)
    calls = [((x,),), (x, "m.onnx")]
    for args in calls:
        with pytest.raises(onnx_export.OnnxExportError) as caught:
            onnx_export.dynamo_export(_Conv(), *args, export_options=_QUIET)
        first = " ".join(str(caught.value).split())[:60].replace("`", "")
        assert first in page, first
    with pytest.raises(onnx_export.ExportInputError) as caught:
        onnx_export.dynamo_export(_Conv(), x, opset_version=17, export_options=_QUIET)
    first = " ".join(str(caught.value).split())[:120]
    assert first in page, first
