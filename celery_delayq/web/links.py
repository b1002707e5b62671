"""Every URL the dashboard writes into a page or a redirect is a path as the browser sees
it, the prefix it is mounted under (``SCRIPT_NAME``: a Django view, a WSGI dispatcher, a
proxy) included: ``url_for`` for a page, ``this_page()`` for the page itself, and a form's
``next`` (where it goes back to) is such a path too, checked by ``safe_next``. No page
builds a path by hand, so none can lose the prefix."""

from __future__ import annotations

import unicodedata
from urllib.parse import quote, urlsplit

from flask import request


def this_page() -> str:
    """This page's path and query, prefix included, as the browser asked for it: where a
    form on it, or a login it is sent to, comes back to (its path quoted again, so a task
    id holding ``?`` or ``#`` stays in the path)."""
    query = request.query_string.decode("latin-1")
    return request.script_root + quote(request.path) + (f"?{query}" if query else "")


def back_to(target: str | None) -> str:
    """``target`` (a form's or a login's ``next``) if it is a page of this dashboard, else
    its overview."""
    return safe_next(target, request.script_root)


def safe_next(target: str | None, mount: str = "") -> str:
    r"""``target`` if it is a path on this site below ``mount`` (the prefix the dashboard
    is served under), else ``mount``'s overview: never another site, nor a page of the app
    the dashboard is mounted in.

    Browsers drop tabs and newlines from URLs and read a backslash as a slash, so
    ``/\t/evil.example`` or ``/\evil.example`` would reach another host: any control or
    invisible character, a backslash, a scheme or a host makes it the overview."""
    home = mount + "/"
    if not target or len(target) > 2000 or not target.startswith(home):
        return home
    if "\\" in target or any(unicodedata.category(c)[0] in "CZ" and c != " " for c in target):
        return home
    if target.startswith("//"):
        return home
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(home):
        return home
    return target
