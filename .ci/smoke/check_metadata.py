"""Check a built wheel's metadata as the package index will take it:

- every classifier is one the index knows and none is deprecated (``trove_classifiers``,
  the list PyPI checks uploads against);
- the long description, rendered as the index renders it (readme_renderer, the library
  PyPI and ``twine check`` use), has only links and images that resolve there: absolute
  URLs, or a fragment naming one of its own headings.

Usage: ``python check_metadata.py WHEEL`` (run by .ci/smoke_wheel.sh with a Python that
has ``readme_renderer[md]`` and ``trove-classifiers``).
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from html.parser import HTMLParser

import readme_renderer.markdown
import trove_classifiers

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


def read_metadata(wheel: str) -> Message:
    """The wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(name).decode())


def check_classifiers(metadata: Message) -> int:
    """1 (and say why) when a classifier is unknown to the index or deprecated."""
    classifiers = metadata.get_all("Classifier") or []
    unknown = [c for c in classifiers if c not in trove_classifiers.classifiers]
    deprecated = [c for c in classifiers if c in trove_classifiers.deprecated_classifiers]
    if unknown or deprecated:
        print(f"FAILED: classifiers unknown {unknown}, deprecated {deprecated}")
        return 1
    print(f"classifiers: {len(classifiers)}, each known to the index")
    return 0


def check_long_description(metadata: Message) -> int:
    """1 (and say why) when the long description has a link dead on the index."""
    text = metadata.get_payload()
    content_type = metadata["Description-Content-Type"] or ""
    assert isinstance(text, str), "METADATA has no description body"
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


def main(wheel: str) -> int:
    metadata = read_metadata(wheel)
    return check_classifiers(metadata) | check_long_description(metadata)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
