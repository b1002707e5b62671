"""The docs' Python blocks: a block that fails fails its test unless a skip marker with a
reason precedes it, and the pages get the ``redis_url`` and ``app`` fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .snippets import ROOT

pytestmark = pytest.mark.integration

pytest.importorskip("sybil", reason="Sybil 10 needs Python 3.11+")

PAGE = textwrap.dedent(
    """\
    # A page

    <!-- invisible-code-block: python
    hidden = "set up out of the reader's sight"
    -->

    ```python
    from celery_delayq import backlog

    assert hidden

    @app.task
    def remind(user_id):
        return user_id

    result = remind.apply_async((7,), countdown=3600)
    assert app.conf.broker_url == redis_url
    [queue] = backlog(app)
    assert queue.pending == 1, queue
    ```

    <!-- skip: next "a fragment: send_report is the reader's" -->
    ```python
    send_report.delay()
    ```

    ```python
    send_report.delay()
    ```

    ```bash
    celery -A proj delayq lsit
    ```
    """
)


CONFTEST = """\
from pathlib import Path

from tests.docs.snippets import app, collector, docs_redis_server, redis_url  # noqa: F401

pytest_collect_file = collector(Path(__file__).parent)
"""


def test_a_page_runs_skips_and_fails_as_marked(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(PAGE)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "docs"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout
    # the hidden block, the block using it, app and redis_url, the skip marker: pass; the
    # marked block: skipped; the same fragment unmarked and the wrong command: fail
    assert "2 failed, 3 passed, 1 skipped" in out, out
    assert "NameError: name 'send_report' is not defined" in out, out
    assert "no command 'lsit'" in out, out
