"""The promise ledger (docs/explanation/promises.md): every promise a user reads names a test
that attacks it with real processes, and every test names only promises the docs make."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from .snippets import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import promise_ledger  # noqa: E402

pytestmark = pytest.mark.unit


def test_every_promise_has_a_test_and_every_named_promise_exists() -> None:
    assert promise_ledger.problems(ROOT) == []


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_the_check_fails_on_an_untested_promise_an_unknown_id_and_a_unit_only_proof(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "docs/guide.md",
        """\
        - **Kept.** A message is never lost. {promise}`never-lost`
          It runs once. {promise}`runs-once`

        Nothing leaks. {promise}`no-leak` Twice: {promise}`no-leak`
        """,
    )
    write(
        tmp_path,
        "tests/worker/test_a.py",
        """\
        import pytest

        pytestmark = pytest.mark.system

        @pytest.mark.promise("never-lost", "made-up")
        def test_kept():
            pass

        class TestLeaks:
            @pytest.mark.slow
            @pytest.mark.promise("runs-once")
            def test_once(self):
                pass
        """,
    )
    write(
        tmp_path,
        "tests/core/test_b.py",
        """\
        import pytest

        pytestmark = [pytest.mark.unit, pytest.mark.promise("no-leak")]

        def test_quiet():
            pass
        """,
    )
    made, _ = promise_ledger.promises(tmp_path)
    assert made["never-lost"].text == "A message is never lost."
    assert made["runs-once"].text == "It runs once."
    assert promise_ledger.attacks(tmp_path) == {
        "never-lost": ["tests/worker/test_a.py::test_kept"],
        "made-up": ["tests/worker/test_a.py::test_kept"],
        "runs-once": ["tests/worker/test_a.py::TestLeaks::test_once"],
        "no-leak": ["tests/core/test_b.py::test_quiet"],
    }
    assert promise_ledger.problems(tmp_path) == [
        "docs/guide.md:4: promise 'no-leak' is made again (first in docs/guide.md:4)",
        "docs/guide.md:4: promise 'no-leak' is named only by tests that run no server:"
        " tests/core/test_b.py::test_quiet",
        "tests/worker/test_a.py::test_kept: names promise 'made-up', which no document makes",
    ]


def test_a_promise_quotes_its_sentence_its_table_cell_and_its_code_as_written(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "docs/guide.md",
        """\
        - **Hosts.** It answers a name in `allowed_hosts` (`"*"` for any): others get a
          400. {promise}`hosts` Headers: `X-Frame-Options: DENY` and `nosniff`; {promise}`frames`
        - **Kept.** `apply_async` returns once stored (see [the store](store.md)). {promise}`kept`

        | | Redis | RabbitMQ |
        |---|---|---|
        | a ready message | never lost {promise}`ready` | `a|b` kept {promise}`piped` |
        """,
    )
    write(
        tmp_path,
        "tests/docs/test_c.py",
        """\
        import pytest

        @pytest.mark.promise("kept")
        def test_built_pages():
            pass
        """,
    )
    made, problems = promise_ledger.promises(tmp_path)
    assert problems == []
    assert {promise_id: promise.text for promise_id, promise in made.items()} == {
        "hosts": 'It answers a name in `allowed_hosts` (`"*"` for any): others get a 400.',
        "frames": "Headers: `X-Frame-Options: DENY` and `nosniff`;",
        "kept": "`apply_async` returns once stored (see the store).",
        "ready": "a ready message: never lost",
        "piped": "a ready message: `a|b` kept",
    }
    # a test of no kind that runs servers (tests/docs/test_c.py has none) proves nothing
    assert (
        "docs/guide.md:3: promise 'kept' is named only by tests that run no server:"
        " tests/docs/test_c.py::test_built_pages"
    ) in promise_ledger.problems(tmp_path)
