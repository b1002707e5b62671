"""The Django tests run the example site (example_project/django_site) with its own
settings, configured here for these tests only: no DJANGO_SETTINGS_MODULE is set, so
the rest of the suite, and the workers it starts, never see Django.

Without Django, pytest-django or django-celery-beat installed, these tests are not
collected.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import _state

try:
    import django
    import django_celery_beat  # noqa: F401
    import pytest_django  # noqa: F401
except ImportError:  # the test extra brings them; an older environment may not have them
    collect_ignore_glob = ["test_*.py"]
    django = None

SETTINGS_MODULE = "example_project.django_site.settings"
#: The SQLite file of the test database (a file, not memory: a worker process reads it).
TEST_DB = Path(tempfile.mkdtemp(prefix="delayq-django-")) / "test.sqlite3"


def pytest_configure(config: pytest.Config) -> None:
    """Configure Django from the site's settings module, with a file test database."""
    if django is None:
        return
    from django.conf import settings

    # Importing the site (its settings module is in its package) sets
    # DJANGO_SETTINGS_MODULE (its celery.py does, as a site's should) and makes its app
    # the default and current one: none of that may reach the rest of the suite, nor the
    # environment of other tests' workers.
    had = "DJANGO_SETTINGS_MODULE" in os.environ
    default, current = _state.default_app, _state._tls.current_app
    if not settings.configured:
        site = importlib.import_module(SETTINGS_MODULE)
        values = {name: getattr(site, name) for name in dir(site) if name.isupper()}
        values["DATABASES"]["default"]["TEST"] = {"NAME": str(TEST_DB)}
        settings.configure(**values)
    django.setup()
    importlib.import_module("example_project.django_site")
    if not had:
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    _state.set_default_app(default)
    _state._set_current_app(current)


@pytest.fixture(scope="package", autouse=True)
def _site_app_closed_afterwards() -> Iterator[None]:
    """pytest-django runs the database tests (all of these) first: after them, the site's
    app is closed, so later tests that look for the one app on celery-delayq (in a thread
    where none is current) do not find it."""
    yield
    from example_project.django_site.celery import app

    app.close()


@pytest.fixture
def site_app(redis_client: Any, redis_server: Any) -> Iterator[Any]:
    """The site's Celery app, current (its ``shared_task`` tasks publish through it), on
    the tests' own Redis (flushed for each test). Its connection pool lives as long as the
    app, so it is left open."""
    from example_project.django_site.celery import app

    # The namespaced name: Celery before 5.7 looks it up (in Django's settings too)
    # before the plain one, so a plain broker_url here would not win.
    app.conf["CELERY_BROKER_URL"] = redis_server.url
    assert app.conf.broker_url == redis_server.url
    current = _state._tls.current_app
    app.set_current()
    yield app
    _state._set_current_app(current)
