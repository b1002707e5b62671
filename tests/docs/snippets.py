"""Docs that run: every ```python block of README.md, the root files the docs include
(CONTRIBUTING.md, SECURITY.md, CHANGELOG.md) and docs/**/*.md is executed by Sybil, and
every command of a ```bash / ```console block is checked; the repository's root
conftest.py hands pytest this module's collector and fixtures.

- Python blocks run in order within a page, sharing one namespace. They get ``redis_url``
  (a private redis-server, flushed for each page) and ``app`` (a Celery app on the
  celery-delayq transport against it). A block that cannot run (a fragment of a settings
  file, Django settings) is preceded by ``<!-- skip: next "why" -->``. A page can set up
  its namespace out of sight, in ``<!-- invisible-code-block: python ... -->``.
- Shell commands are checked, not run (``tests.docs.commands``).
- Under pytest-xdist (``-n 2``) a page's blocks all run in one test process, in order
  (``pytest_xdist_make_scheduler``): split between processes, a later block would miss
  the names an earlier one defined. Every other test is dealt out one by one, as xdist's
  default ``--dist load`` does.

Sybil 10 needs Python 3.11: on older Pythons the pages are skipped, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import kombu.pools
import pytest
from celery import Celery
from celery import _state as celery_state

from celery_delayq.testing import RedisServer, build_app

from .commands import check_block

ROOT = Path(__file__).resolve().parents[2]
#: fnmatch patterns of the root-relative paths (``*`` spans folders too)
PAGES = ["README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md", "docs/*.md"]
EXCLUDED = ["docs/_build/*", "docs/design/*"]
SHELL_LANGUAGES = ("bash", "console", "shell", "sh")

try:
    from sybil import Sybil
    from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser, SkipParser
except ImportError:  # Python < 3.11, or the test extra without sybil
    Sybil = None


def _check_shell(example: Any) -> None:
    check_block(str(example.parsed), language=example.region.lexemes["arguments"])


def _sybil(root: Path) -> Any:
    class Pages(Sybil):  # type: ignore[misc,valid-type]
        def should_parse(self, path: Path) -> bool:
            return _is_page(path, root)

    return Pages(
        parsers=[
            SkipParser(),
            PythonCodeBlockParser(),
            *(CodeBlockParser(language=lang, evaluator=_check_shell) for lang in SHELL_LANGUAGES),
        ],
        fixtures=["redis_url", "app"],
        setup=_name_the_page,
        path=str(root),
    )


def _name_the_page(namespace: dict[str, Any]) -> None:
    """Functions a page defines get a module name, as Celery's task names need one."""
    namespace["__name__"] = "docs_page"


class _SkippedPage(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        pytest.skip("the docs' code blocks run with Sybil 10, which needs Python 3.11+")


def _is_page(file_path: Path, root: Path) -> bool:
    try:
        relative = file_path.relative_to(root)
    except ValueError:
        return False
    name = relative.as_posix()
    return any(fnmatchcase(name, p) for p in PAGES) and not any(
        fnmatchcase(name, e) for e in EXCLUDED
    )


def collector(root: Path) -> Any:
    """A ``pytest_collect_file`` hook for the pages under ``root`` (README.md, docs/)."""
    if Sybil is not None:
        return _sybil(root).pytest()

    def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
        if _is_page(file_path, root):
            return _SkippedPage.from_parent(parent, path=file_path)
        return None

    return pytest_collect_file


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's default scheduling, but with each page's blocks kept together."""
    if config.getvalue("dist") != "load":
        return None  # the --dist asked for
    from xdist.scheduler import LoadScopeScheduling

    class PagesTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _is_page(ROOT / path, ROOT) else nodeid

    return PagesTogether(config, log)


@pytest.fixture(scope="session")
def docs_redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def redis_url(docs_redis_server: RedisServer) -> str:
    """A private Redis, flushed for each page (a page is a module to pytest here)."""
    client = docs_redis_server.client()
    client.flushall()
    client.script_flush()
    client.close()
    return docs_redis_server.url


@pytest.fixture(scope="module")
def app(redis_url: str) -> Iterator[Celery]:
    """A Celery app on the celery-delayq transport against ``redis_url``."""
    kombu.pools.reset()
    # ``@app.task`` registers a shared task that every app finalized later would take;
    # the page's tasks are the page's own, so they are dropped with it.
    finalizers = set(celery_state._on_app_finalizers)
    previous_app = getattr(celery_state._tls, "current_app", None)
    celery_app = build_app(
        "docs",
        {"broker_url": redis_url, "broker_connection_retry_on_startup": False},
        current=True,
    )
    yield celery_app
    celery_app.close()
    kombu.pools.reset()
    celery_state._on_app_finalizers.intersection_update(finalizers)
    celery_state._tls.current_app = previous_app
