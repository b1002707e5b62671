"""Broker and store URLs made safe to print: every password of every part masked.

One URL setting may name several servers: Celery's failover form joins URLs with ``;``
(``amqp://u:p@h1//;amqp://u:p@h2//``, ``sentinel://:p@h1:26379;sentinel://:p@h2:26379``),
a cluster URL lists hosts with commas (``redis+cluster://u:p@a:7000,b:7000/0``), and a
password may sit in the query string (``?password=...``). kombu's ``maybe_sanitize_url``
masks the first URL only, and raises on a host list (its port cannot be read), so every
URL that reaches a log line, a command's output or a page goes through ``sanitize_url``.
It never raises: a message about a bad URL must not fail on the URL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "**"

#: Query-string keys whose values are secrets (``password``, ``sentinel_password``,
#: ``sentinel_kwargs``, ``secret_key``, ``token``...).
_SECRET_KEY = re.compile(r"pass|secret|token|auth|cred|kwargs", re.IGNORECASE)
#: One host of a host list: a name or IPv4 address, or a bracketed IPv6 one, with a port.
_HOST = re.compile(r"[\w.\-]*(:\d*)?|\[[0-9A-Fa-f:.]*\](:\d*)?")
#: A scheme with its "//" (a part without one, such as the rest of a password cut at an
#: unescaped ";", is read as an authority alone).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def url_parts(url: str | Iterable[str] | None) -> list[str]:
    """The URLs of a setting: ``a;b`` split as kombu splits it, or Celery's list form."""
    if url is None:
        return []
    if not isinstance(url, str):
        url = ";".join(str(one) for one in url)
    return url.split(";")


def sanitize_url(url: str | Iterable[str] | None) -> str:
    """``url`` (or Celery's list of failover URLs) with every password masked."""
    return ";".join(_sanitize_one(part) for part in url_parts(url))


def _sanitize_one(url: str) -> str:
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    rest = url[start:]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in tail:
        # A password with "/", "?" or "#" unescaped, or an "@" in the path or query:
        # where the credentials end is unclear, so nothing after the scheme is shown.
        return url[:start] + MASK
    return url[:start] + _sanitize_authority(authority, bool(scheme)) + _sanitize_tail(tail)


def _sanitize_authority(authority: str, has_scheme: bool) -> str:
    userinfo, at, hosts = authority.rpartition("@")
    if at and "@" not in userinfo and "," not in userinfo:
        user, colon, _ = userinfo.partition(":")
        if colon or has_scheme:  # a user name alone is no secret
            return f"{user}:{MASK}@{hosts}" if colon else authority
    # Credentials per host, a password with "," or "@" in it, or text that is no host
    # (a password cut at an unescaped ";"): keep what reads as a host, mask the rest.
    return ",".join(_sanitize_host(piece) for piece in authority.split(","))


def _sanitize_host(piece: str) -> str:
    if "@" in piece:
        return f"{MASK}@{piece.rpartition('@')[2]}"
    return piece if _HOST.fullmatch(piece) else MASK


def _sanitize_tail(tail: str) -> str:
    path, question, query = tail.partition("?")
    if not question:
        return tail
    query, hash_, fragment = query.partition("#")
    pairs = []
    for pair in query.split("&"):
        key, equals, _ = pair.partition("=")
        secret = equals and _SECRET_KEY.search(unquote(key))
        pairs.append(f"{key}={MASK}" if secret else pair)
    return f"{path}?{'&'.join(pairs)}{hash_}{fragment}"
