"""Options of the op tests: ``--runslow`` runs the full OpInfo sweep (``@pytest.mark.slow``).

pytest reads this file's options when ``tests/ops`` is among the paths given:
``python -m pytest tests/ops --runslow`` (or set ``ONNX_EXPORT_RUNSLOW=1``).
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import private_temp_folder

__all__ = ["private_temp_folder"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow",
        action="store_true",
        default=False,
        help="run the slow tests (the full OpInfo sweep of tests/ops)",
    )


def _run_slow(config: pytest.Config) -> bool:
    try:
        option = bool(config.getoption("--runslow"))
    except ValueError:  # the option was not registered (tests/ops not on the command line)
        option = False
    return option or os.environ.get("ONNX_EXPORT_RUNSLOW") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _run_slow(config):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")
    for item in items:
        if "slow" in item.keywords and "tests/ops/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
