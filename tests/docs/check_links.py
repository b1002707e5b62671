"""Check the internal links of a built HTML site: every relative ``href``/``src`` points
at a file of the site and, with a ``#fragment``, at an ``id`` in it. External links
(any URL with a scheme) are not checked: CI cannot reach them.

Usage: ``python -m tests.docs.check_links BUILD_DIR``; exits 1, listing each broken link.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            elif name in ("href", "src") and value is not None and tag != "base":
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """``page: link (why)`` for every internal link of ``site`` that leads nowhere."""
    pages = {path.resolve(): _parse(path) for path in sorted(site.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            why = _check(site.resolve(), path, link, pages)
            if why:
                broken.append(f"{path.relative_to(site.resolve())}: {link} ({why})")
    return broken


def _check(site: Path, page: Path, link: str, pages: dict[Path, _Page]) -> str | None:
    parts = urlsplit(link)
    if parts.scheme or parts.netloc:
        return None  # external (http:, mailto:, data:...): not checked
    target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
    if target.is_dir():
        target = target / "index.html"
    if not target.is_relative_to(site):
        return "outside the site"
    if not target.is_file():
        return "no such file"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html":
        ids = (pages.get(target) or _parse(target)).ids
        if fragment not in ids:
            return f"no #{fragment} in {target.relative_to(site)}"
    return None


def main(argv: list[str]) -> int:
    site = Path(argv[1])
    if not (site / "index.html").is_file():
        print(f"{site} holds no built site (index.html)", file=sys.stderr)
        return 2
    broken = broken_links(site)
    for line in broken:
        print(line)
    pages = len(list(site.rglob("*.html")))
    print(f"{pages} pages, {len(broken)} broken internal links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
