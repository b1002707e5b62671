"""The built documentation site in headless Chromium: the index and two guides render
with their navigation (furo's sidebar holding the whole toctree), and a sidebar link leads
to its page.

Needs a built site in ``DELAYQ_DOCS_HTML`` (``.ci/docs.sh`` builds it and runs this);
without one these tests skip. Without Chromium or Playwright they skip too, unless
``DELAYQ_REQUIRE_BROWSER`` is set, where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from ..helpers import chromium

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

#: Pages every page's sidebar links to: one per toctree caption.
SIDEBAR_PAGES = [
    "getting-started/demo.html",
    "guides/redis-production.html",
    "guides/django.html",
    "reference/settings.html",
    "explanation/design.html",
    "project/changelog.html",
]
PAGES = ["index.html", "guides/redis-production.html", "guides/monitoring.html"]


@pytest.fixture(scope="module")
def site() -> Path:
    folder = os.environ.get("DELAYQ_DOCS_HTML")
    if not folder or not (Path(folder) / "index.html").is_file():
        pytest.skip("no built site: set DELAYQ_DOCS_HTML to a sphinx-build html output")
    return Path(folder).resolve()


@pytest.fixture(scope="module")
def browser(site: Path) -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"script errors on the page: {errors}"


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_with_its_navigation(site: Path, page: Any, path: str) -> None:
    page.goto((site / path).as_uri())
    heading = page.locator("article h1").first
    assert heading.is_visible()
    assert heading.inner_text().strip()
    sidebar = page.locator(".sidebar-tree")
    assert sidebar.is_visible(), "the sidebar's toctree is not shown"
    hrefs = [  # resolved by the browser: file:///.../html/guides/django.html
        Path(unquote(urlsplit(href).path)).relative_to(site).as_posix()
        for href in sidebar.locator("a.reference").evaluate_all("links => links.map(a => a.href)")
    ]
    missing = [p for p in SIDEBAR_PAGES if p not in hrefs]
    assert not missing, f"sidebar of {path} lacks {missing}: {hrefs}"
    if path != "index.html":  # the page itself is marked current in the sidebar
        current = sidebar.locator("li.current > a").first
        assert current.inner_text().strip() == heading.inner_text().strip().rstrip("¶")


def test_a_sidebar_link_leads_to_its_page(site: Path, page: Any) -> None:
    page.goto((site / "index.html").as_uri())
    page.locator(".sidebar-tree a.reference", has_text="Settings").first.click()
    page.wait_for_url("**/reference/settings.html")
    assert page.locator("article h1").first.inner_text().startswith("Settings")
    assert page.locator("article :is(h2, h3)", has_text="delayq_move_ahead").count() == 1
