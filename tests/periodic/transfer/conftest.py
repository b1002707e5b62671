"""The app these tests import into: on the tests' Redis, in a time zone of the test's
choosing, knowing the entries' task (so an import raises no UnknownTaskWarning)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from ...helpers import PERIODIC_TASK


@pytest.fixture
def zoned_app(make_app: Callable[..., Celery]) -> Callable[[str], Celery]:
    def make(zone: str) -> Celery:
        app = make_app(timezone=zone)

        @app.task(name=PERIODIC_TASK, shared=False)
        def tick(*args: Any, **kwargs: Any) -> None:
            """The entries' task."""

        return app

    return make
