"""Reading the Periodic pages as a browser would, for the tests of their forms: the fields
a form submits, the runs a preview shows, the error said beside a field."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from typing import Any


class EntryForm(HTMLParser):
    """The fields the page's entry form submits as it stands (checked boxes and radio
    buttons, selected options, text areas), its buttons left out."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select: str | None = None
        self._text: str | None = None
        self._option: list[str] | None = None
        self.feed(body)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {name: value or "" for name, value in attrs}
        if tag == "input" and a.get("name"):
            kind = a.get("type", "text")
            if kind not in ("radio", "checkbox") or "checked" in a:
                self.fields[a["name"]] = a.get("value", "on")
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select and "selected" in a:
            self._option = []
        elif tag == "textarea":
            self._text = a["name"]
            self.fields[a["name"]] = ""

    def handle_data(self, data: str) -> None:
        if self._option is not None:
            self._option.append(data)
        elif self._text is not None:
            self.fields[self._text] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "option" and self._option is not None and self._select:
            self.fields[self._select] = "".join(self._option)
            self._option = None
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._text = None


def form_fields(response: Any) -> dict[str, str]:
    return EntryForm(response.get_data(as_text=True)).fields


def preview_runs(response: Any) -> list[tuple[str, str]]:
    """A preview's runs: (on the entry's clocks, UTC as ISO 8601)."""
    found = re.findall(
        r'<tr><td>([^<]*)</td><td><time datetime="([^"]+)">', response.get_data(as_text=True)
    )
    return [(html.unescape(local), iso) for local, iso in found]


def error_beside(response: Any, field: str) -> str | None:
    """The error said beside ``field``, as text (None: none)."""
    found = re.search(
        rf'<span class="error" id="error-{field}">(.*?)</span>', response.get_data(as_text=True)
    )
    return html.unescape(found.group(1)) if found else None


def errors_said(response: Any) -> list[str]:
    """Every field an error is said beside."""
    return re.findall(r'class="error" id="error-([^"]*)"', response.get_data(as_text=True))
