"""The ``promise`` role and the ``delayq-promises`` directive (the ledger page).

``{promise}`id``` after a sentence shows the id as a link to its entry on the ledger page;
the entry quotes the promise, names the page and line that make it and every test that
attacks it. Both sides are read from the source files (``promise_ledger``), so the page
cannot drift from the tests; ``tests/docs/test_promises.py`` fails on a promise without a
test, and the build fails (``-W``) on a link to an id the page does not have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import promise_ledger
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
LEDGER_DOCNAME = "explanation/promises"


def label(promise_id: str) -> str:
    return f"promise-{promise_id}"


def promise_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: dict[str, Any] | None = None,
    content: Sequence[str] = (),
) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    """``{promise}`id``` is a ``[id]`` link to the id's entry on the ledger page."""
    reference = addnodes.pending_xref(
        rawtext,
        refdomain="std",
        reftype="ref",
        reftarget=label(text),
        refexplicit=True,
        refwarn=True,
        refdoc=inliner.document.settings.env.docname,
    )
    reference += nodes.inline(rawtext, f"[{text}]", classes=["xref", "std", "std-ref"])
    return [reference], []


class PromisesDirective(SphinxDirective):
    """Every promise, grouped by the page that makes it, with the tests that attack it."""

    def run(self) -> list[nodes.Node]:
        made, _ = promise_ledger.promises(ROOT)
        named = promise_ledger.attacks(ROOT)
        std = self.env.get_domain("std")
        sections: list[nodes.Node] = []
        for path in sorted({promise.path for promise in made.values()}):
            section = nodes.section(ids=[nodes.make_id(f"promises-{path}")])
            section += nodes.title(text=path)
            for promise in sorted(made.values(), key=lambda p: p.line):
                if promise.path == path:
                    section += self.entry(promise, named.get(promise.id, []))
                    std.note_hyperlink_target(
                        label(promise.id), self.env.docname, label(promise.id), promise.id
                    )
            sections.append(section)
        return sections

    def entry(self, promise: promise_ledger.Promise, tests: list[str]) -> list[nodes.Node]:
        said = nodes.paragraph(ids=[label(promise.id)])
        said += nodes.strong(text=promise.id)
        said += nodes.Text(" (")
        said += self.page_link(promise.path)
        said += nodes.Text(f", line {promise.line}): ")
        for at, part in enumerate(re.split(r"`([^`]*)`", promise.text)):
            said += nodes.literal(text=part) if at % 2 else nodes.Text(part)
        proofs = nodes.bullet_list()
        for test in tests:
            proofs += nodes.list_item("", nodes.paragraph("", "", nodes.literal(text=test)))
        return [said, proofs]

    def page_link(self, path: str) -> nodes.Node:
        """``path`` as a link to the page of the site that shows it (a file outside
        ``docs/`` through the page that includes it), or as text if none does."""
        docname = shown_in(path)
        if docname is None:
            return nodes.Text(path)
        reference = addnodes.pending_xref(
            "",
            refdomain="std",
            reftype="doc",
            reftarget=f"/{docname}",
            refexplicit=True,
            refdoc=self.env.docname,
        )
        reference += nodes.inline("", path)
        return reference


def shown_in(path: str) -> str | None:
    """The docname of the page that shows ``path``: itself under ``docs/``, else the page
    whose ``{include}`` names it."""
    if path.startswith("docs/"):
        return path.removeprefix("docs/").removesuffix(".md")
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for included in re.findall(r"\{include\}\s+(\S+)", page.read_text(encoding="utf-8")):
            if (page.parent / included).resolve() == (ROOT / path).resolve():
                return page.relative_to(ROOT / "docs").with_suffix("").as_posix()
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("promise", promise_role)
    app.add_directive("delayq-promises", PromisesDirective)
    # The ledger reads every page and test: read it again on every build, not only when
    # its own source changes.
    app.connect("env-get-outdated", lambda *_: [LEDGER_DOCNAME])
    return {"parallel_read_safe": True, "parallel_write_safe": True}
