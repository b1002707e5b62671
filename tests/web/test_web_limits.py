"""The dashboard's Limits page, against a real Redis and messages published through a real
app under its limits and released by the real move: the numbers it shows equal what was
published and delivered, and limit keys (anyone's data) are shown as text, never markup."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access

from ..helpers import publish_limited

pytestmark = pytest.mark.integration

pytest.importorskip("flask")

SEND, RUN = "tests.send", "tests.run"
SCRIPT = "<script>alert('key')</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'


class Table(HTMLParser):
    """The text of each cell of the page's bucket table (``table.limits``), row by row;
    and every tag the page holds."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: list[str] = []
        self._in_table = self._in_body = False
        self.feed(body)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "table" and ("class", "limits") in attrs:
            self._in_table = True
        elif self._in_table and tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag == "td":
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_table = self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._in_body and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def page(app: Any, query: str = "") -> tuple[int, str]:
    response = create_app(app, access=Access()).test_client().get(f"/limits{query}")
    return response.status_code, response.get_data(as_text=True)


def test_the_page_lists_buckets_most_waiting_first_with_their_numbers(make_app: Any) -> None:
    app = make_app(delayq_rate_limits={SEND: ["1/m", "100/d"]}, delayq_concurrency_limits={RUN: 2})
    publish_limited(app, SEND, 5, key=SCRIPT)
    publish_limited(app, SEND, 4, key=ATTRIBUTE)
    publish_limited(app, RUN, 4)
    with open_store(app) as store:
        store.move_all_due()
        delivered = store.client.llen("default")

    status, body = page(app)

    assert status == 200 and delivered == 1 + 1 + 2
    table = Table(body)
    rows = [[cell.strip() for cell in row[:7]] for row in table.rows]
    assert rows == [
        ["default", SEND, SCRIPT, "1/m, 100/d", "4", "1 in 1m, 1 in 1d", "-"],
        ["default", SEND, ATTRIBUTE, "1/m, 100/d", "3", "1 in 1m, 1 in 1d", "-"],
        ["default", RUN, "-", "2 at once", "2", "-", "2/2"],
    ]
    assert all(row[7].startswith("throttled for ") for row in table.rows)
    assert table.tags.count("script") == 0 and "img" not in table.tags
    assert "&lt;script&gt;alert(&#39;key&#39;)&lt;/script&gt;" in body
    assert "3 bucket(s): 9 waiting, 2 running, 3 throttled, 0 paused or held" in body

    _, only = page(app, f"?task={RUN}&queue=default")
    assert [row[1] for row in Table(only).rows] == [RUN]
    _, none = page(app, "?queue=other")
    assert [[cell.strip() for cell in row] for row in Table(none).rows] == [
        ["No flow-controlled messages."]
    ]


def test_the_page_is_in_the_navigation_and_refuses_an_overlong_filter(make_app: Any) -> None:
    app = make_app()
    status, body = page(app)
    assert status == 200 and '<a href="/limits" class="here">Limits</a>' in body
    status, body = page(app, "?task=" + "x" * 501)
    assert status == 400 and "task: longer than 500 characters" in body
