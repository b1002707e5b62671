"""Fixtures of the dashboard's tests (the others: tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where a browser test keeps its screenshots: ``DELAYQ_SCREENSHOTS`` if set, else the
    test's temporary directory."""
    folder = Path(os.environ.get("DELAYQ_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
