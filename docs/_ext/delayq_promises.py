"""The ``promise`` role and the ``delayq-promises`` directive (the ledger page).

``{promise}`id``` after a sentence shows the id as a link to its entry on the ledger page;
the entry quotes the promise, links back to where it is made and names every test that
attacks it. Both sides are read from the source files (``promise_ledger``), so the page
cannot drift from the tests; ``tests/docs/test_promises.py`` fails on a promise without a
test, and the build fails (``-W``) on a link to an id the page does not have.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import promise_ledger
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.roles import XRefRole
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[2]


def label(promise_id: str) -> str:
    return f"promise-{promise_id}"


def escaped(text: str) -> str:
    """Plain words as reStructuredText: every character markup could take, escaped."""
    return re.sub(r"([\\`*_|<>\[\]:])", r"\\\1", text)


class PromiseRole(XRefRole):
    """``{promise}`id``` is ``{ref}`[id] <promise-id>```: a link to the ledger entry."""

    def __init__(self) -> None:
        super().__init__(innernodeclass=nodes.inline, warn_dangling=True)

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        promise_id = self.text
        self.text = f"[{promise_id}] <{label(promise_id)}>"
        self.title, self.target = f"[{promise_id}]", label(promise_id)
        self.has_explicit_title = True
        self.refdomain, self.reftype = "std", "ref"
        return self.create_xref_node()


class PromisesDirective(SphinxDirective):
    """Every promise, grouped by the page that makes it, with the tests that attack it."""

    def run(self) -> list[nodes.Node]:
        made, _ = promise_ledger.promises(ROOT)
        named = promise_ledger.attacks(ROOT)
        lines: list[str] = []
        for path in sorted({promise.path for promise in made.values()}):
            lines += [path, "-" * len(path), ""]
            for promise in sorted(made.values(), key=lambda p: p.line):
                if promise.path != path:
                    continue
                tests = named.get(promise.id, [])
                lines += [
                    f".. _{label(promise.id)}:",
                    "",
                    f"**{promise.id}** ({path}, line {promise.line}): {escaped(promise.text)}",
                    "",
                    *(f"- ``{test}``" for test in tests),
                    "",
                ]
        container = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, "promises"), container)
        return container.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("promise", PromiseRole())
    app.add_directive("delayq-promises", PromisesDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
