"""A periodic entry added from the example site's ``manage.py shell`` (issue 34, finding
14): its task, which Django's ``autodiscover_tasks`` registers only when the app's task
modules are imported, is known, so no ``UnknownTaskWarning`` is raised; an unknown one
still warns."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from celery_delayq.testing import RedisServer

from ..helpers import REPO_ROOT
from .conftest import SETTINGS_MODULE

pytestmark = [pytest.mark.integration, pytest.mark.promise("periodic-django-tasks-known")]

CONFIRM = "example_project.django_site.shop.tasks.confirm_order"


def shell(redis_url: str, task: str) -> subprocess.CompletedProcess[str]:
    """``manage.py shell -c``: an upsert of ``task``, with UnknownTaskWarning an error."""
    code = (
        "import warnings\n"
        "from celery_delayq import periodic\n"
        "from example_project.django_site.celery import app\n"
        "warnings.simplefilter('error', periodic.UnknownTaskWarning)\n"
        f"periodic.upsert(app, 'confirm', {task!r}, 60.0, args=[1])\n"
        "print('upserted', periodic.get(app, 'confirm').entry.task)\n"
    )
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        REDIS_URL=redis_url,
        DJANGO_SITE_DB=os.path.join(tempfile.mkdtemp(prefix="delayq-shell-"), "db.sqlite3"),
    )
    manage = REPO_ROOT / "example_project" / "django_site" / "manage.py"
    return subprocess.run(
        [sys.executable, str(manage), "shell", "-c", code],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_upsert_in_manage_py_shell_knows_the_sites_autodiscovered_task(
    redis_server: RedisServer, redis_client
) -> None:
    done = shell(redis_server.url, CONFIRM)
    assert done.returncode == 0, done.stderr
    assert f"upserted {CONFIRM}" in done.stdout


def test_an_upsert_in_manage_py_shell_of_an_unknown_task_still_warns(
    redis_server: RedisServer, redis_client
) -> None:
    done = shell(redis_server.url, "shop.tasks.no_such_task")
    assert done.returncode == 1
    assert "UnknownTaskWarning" in done.stderr
