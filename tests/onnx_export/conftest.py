"""Fixtures for the exporter core tests."""

from __future__ import annotations

from tests.helpers import private_temp_folder

__all__ = ["private_temp_folder"]  # opt-in: keeps failed exports' reports out of /tmp
