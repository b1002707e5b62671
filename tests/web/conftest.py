"""Fixtures of the dashboard's tests (the others: tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    """The app of the dashboard's tests: ``periodic_app``, since the dashboard shows and edits
    periodic entries of ``PERIODIC_TASK`` (a task the other pages never look at)."""
    return periodic_app


@pytest.fixture
def client(app: Celery) -> Any:
    """The dashboard of ``app``, no token asked, as Flask's test client."""
    return create_app(app, access=Access()).test_client()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where a browser test keeps its screenshots: ``DELAYQ_SCREENSHOTS`` if set, else the
    test's temporary directory."""
    folder = Path(os.environ.get("DELAYQ_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
