"""How a setting is declared: a dataclass field with its doc, its rule and its variable."""

from __future__ import annotations

import dataclasses
from typing import Any

SETTING_PREFIX = "delayq_"
WEB_PREFIX = "delayq_web_"


def setting(default: Any, doc: str, *, valid: str | None = None, env: str | None = None) -> Any:
    """A settings field: its default and the ``doc`` the reference shows; what values are
    ``valid`` (the words of the error that refuses any other), and for a web setting the
    ``env`` variable that wins over it."""
    extra = {"valid": valid, "env": env}
    metadata = {"doc": doc, **{key: value for key, value in extra.items() if value}}
    return dataclasses.field(default=default, metadata=metadata)
