"""Every celery-delayq setting in one registry: the settings reference is generated from
it, and tests check the docs against it."""

from __future__ import annotations

import dataclasses
from typing import Any

from .dashboard import WebConfig
from .fields import SETTING_PREFIX, WEB_PREFIX
from .settings import DelayqConfig

#: Every celery-delayq setting, by its Celery name: the field that defines it: its
#: ``type`` (a string), ``default`` and ``metadata["doc"]``; where values are checked,
#: ``metadata["valid"]``; for a web setting, ``metadata["env"]``.
SETTINGS: dict[str, dataclasses.Field[Any]] = {
    **{
        SETTING_PREFIX + field.name: field
        for field in dataclasses.fields(DelayqConfig)
        if "doc" in field.metadata
    },
    **{WEB_PREFIX + field.name: field for field in dataclasses.fields(WebConfig)},
}
#: The web dashboard's setting names (celery_delayq/web reads them through WebConfig).
WEB_SETTINGS = frozenset(name for name in SETTINGS if name.startswith(WEB_PREFIX))
