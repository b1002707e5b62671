"""Paging through the dashboard's task listing as a user does."""

from __future__ import annotations

import re
from typing import Any

#: The link to the listing's next page: "Next", or "Search further" when the page spent
#: its time or scan budget before it was full (a loaded machine), which a user follows too.
NEXT_LINK = re.compile(r'href="([^"]+)">(?:Next|Search further) »')


def next_page(response: Any) -> str | None:
    """The URL of the page after this one, or None on the last."""
    found = NEXT_LINK.search(response.get_data(as_text=True))
    return found.group(1).replace("&amp;", "&") if found else None


def cut_short(response: Any) -> bool:
    """Whether the page spent its budget before it was full (it then also looks whether
    anything lies further: one more short read)."""
    return "Search further »" in response.get_data(as_text=True)
