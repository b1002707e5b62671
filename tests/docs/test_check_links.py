"""The internal-link check of the built site finds a missing page and a missing anchor,
and leaves external links alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from .check_links import broken_links, main

pytestmark = pytest.mark.unit


def _site(tmp_path: Path, guide_links: str) -> Path:
    (tmp_path / "guides").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="guides/a.html#setup">A</a> <a href="#top">top</a> <p id="top"></p>'
        '<img src="_static/logo.png"> <a href="https://example.invalid/x">out</a>'
    )
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "logo.png").write_bytes(b"png")
    (tmp_path / "guides" / "a.html").write_text(f'<h2 id="setup">Set-up</h2>{guide_links}')
    return tmp_path


def test_a_sound_site_passes(tmp_path: Path) -> None:
    site = _site(tmp_path, '<a href="../index.html">home</a> <a href="../">home</a>')
    assert broken_links(site) == []
    assert main(["check_links", str(site)]) == 0


def test_missing_files_and_anchors_are_reported(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        '<a href="b.html">b</a> <a href="../index.html#nowhere">x</a> <a href="#setup">ok</a>'
        '<a href="mailto:someone@example.invalid">mail</a>',
    )
    assert broken_links(site) == [
        "guides/a.html: b.html (no such file)",
        "guides/a.html: ../index.html#nowhere (no #nowhere in index.html)",
    ]
    assert main(["check_links", str(site)]) == 1
