"""pytest at the repository root: the README's and docs/ pages' code blocks run as tests
(tests/docs/snippets.py: Sybil for ```python blocks, a check of shell commands)."""

from pathlib import Path

from tests.docs.snippets import (
    app,
    collector,
    docs_redis_server,
    pytest_xdist_make_scheduler,
    redis_url,
)

__all__ = [
    "app",
    "docs_redis_server",
    "pytest_collect_file",
    "pytest_xdist_make_scheduler",
    "redis_url",
]

pytest_collect_file = collector(Path(__file__).parent)
