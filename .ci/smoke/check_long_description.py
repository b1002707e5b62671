"""Check the long description a built wheel carries, rendered as the package index renders
it (readme_renderer, the library PyPI and ``twine check`` use): every link and image must
resolve there, so it may name only absolute URLs, or a fragment of one of its own headings.

Usage: ``python check_long_description.py WHEEL`` (run by .ci/smoke_wheel.sh with a Python
that has ``readme_renderer[md]``).
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.parser import Parser
from html.parser import HTMLParser

import readme_renderer.markdown

ABSOLUTE = re.compile(r"^(https?|mailto):", re.IGNORECASE)


class Targets(HTMLParser):
    """The href and src of every element, and every id (a fragment may name one)."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.targets.append(value)
            elif name == "id" and value is not None:
                self.ids.add(value)


def long_description(wheel: str) -> tuple[str, str]:
    """The wheel's description and its content type, from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    body = metadata.get_payload()
    assert isinstance(body, str), "METADATA has no description body"
    return body, metadata["Description-Content-Type"] or ""


def main(wheel: str) -> int:
    text, content_type = long_description(wheel)
    if not content_type.startswith("text/markdown"):
        print(f"FAILED: the long description is {content_type!r}, not text/markdown")
        return 1
    html = readme_renderer.markdown.render(text)
    if html is None:
        print("FAILED: readme_renderer could not render Markdown (install readme_renderer[md])")
        return 1
    parsed = Targets()
    parsed.feed(html)
    dead = [
        target
        for target in parsed.targets
        if not ABSOLUTE.match(target) and not (target.startswith("#") and target[1:] in parsed.ids)
    ]
    if dead:
        print(f"FAILED: links and images dead on the package index: {dead}")
        return 1
    print(f"long description: {len(parsed.targets)} links and images, all absolute or anchors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
