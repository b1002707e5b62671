"""The settings the docs name are the settings there are: every ``delayq_*`` (and
``CELERY_DELAYQ_*``) name in the README and docs/ is in the registry, and every name in
the registry carries its own documentation (the settings reference is generated from it).
A worker, beat and the dashboard started with every one of them:
tests/config/test_web_settings.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from celery_delayq.brokers.common.key_headers import KEY_HEADER, MAX_WAIT_HEADER, ON_HELD_HEADER
from celery_delayq.brokers.redis.restore import REDELIVERIES_HEADER
from celery_delayq.config.catalog import SETTINGS
from celery_delayq.config.limits import CONCURRENCY_OPTION, LIMIT_KEY_HEADER, RATE_OPTION
from celery_delayq.demo import DEMO_QUEUE

from ..helpers import REPO_ROOT

pytestmark = pytest.mark.unit

#: ``delayq_`` names that are message headers, task options (the limit key header is one
#: too) or the demo's queue (its output shows it), not settings.
HEADERS = {KEY_HEADER, ON_HELD_HEADER, MAX_WAIT_HEADER, REDELIVERIES_HEADER, LIMIT_KEY_HEADER}
NOT_SETTINGS = HEADERS | {DEMO_QUEUE, RATE_OPTION, CONCURRENCY_OPTION}
#: A whole name: not the tail of ``celery_delayq_pending`` (a metric) or of a longer word.
PLAIN = re.compile(r"(?<![A-Za-z0-9_])delayq_[a-z_]*[a-z]")
NAMESPACED = re.compile(r"(?<![A-Za-z0-9_])CELERY_DELAYQ_[A-Z_]*[A-Z]")


def doc_pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def mentioned() -> dict[str, set[str]]:
    """Setting name (plain form) -> the pages that mention it, either form."""
    found: dict[str, set[str]] = {}
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        names = set(PLAIN.findall(text)) | {
            name.lower().removeprefix("celery_") for name in NAMESPACED.findall(text)
        }
        for name in names - NOT_SETTINGS:
            found.setdefault(name, set()).add(str(page.relative_to(REPO_ROOT)))
    return found


def test_the_pages_are_found():
    assert len(doc_pages()) > 1
    assert "delayq_store_url" in mentioned()


def test_every_setting_the_docs_name_exists():
    unknown = {name: sorted(pages) for name, pages in mentioned().items() if name not in SETTINGS}
    assert not unknown, f"documented but not a celery-delayq setting: {unknown}"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_setting_is_documented(name):
    """The registry's own words (the generated reference shows them) or a page."""
    doc = SETTINGS[name].metadata.get("doc", "")
    assert len(doc.split()) >= 5 or name in mentioned(), f"{name} is documented nowhere"


def test_the_namespaced_form_is_read_as_the_plain_one():
    text = "CELERY_DELAYQ_MOVE_AHEAD = 0.05 and CELERY_DELAYQ_WEB_TOKEN, not celery_delayq_up"
    assert set(PLAIN.findall(text)) == set()
    assert {n.lower().removeprefix("celery_") for n in NAMESPACED.findall(text)} == {
        "delayq_move_ahead",
        "delayq_web_token",
    }
