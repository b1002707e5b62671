"""What the docs promise that can be checked without a server."""

from __future__ import annotations

import pytest

from ..acl import APP1_ACL
from ..helpers import REPO_ROOT

pytestmark = pytest.mark.unit


def test_the_production_guide_quotes_the_acl_line() -> None:
    guide = (REPO_ROOT / "docs" / "guides" / "redis-production.md").read_text()
    assert f"ACL SETUSER app1 {APP1_ACL}" in guide
