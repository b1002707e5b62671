"""Every celery-delayq setting, the dashboard's among them, as the docs give them: a
worker, beat, a standalone mover and ``celery delayq web`` all start with them, and the
dashboard asks for the credentials they set (401, or the token's login page, without;
200 with)."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from typing import Any

import pytest

from celery_delayq.config.catalog import SETTINGS
from celery_delayq.testing import free_port, wait_until

from ..helpers import celery_process, runs, standalone_mover

pytestmark = [pytest.mark.system, pytest.mark.slow]

SECRET = "a-long-Secret-9876"
BASIC = {"delayq_web_username": "ops", "delayq_web_password": SECRET}
TOKEN = {"delayq_web_token": SECRET}


def every_setting_at_its_default() -> dict[str, Any]:
    """Each registered setting that has a value by default, set to it (JSON-able)."""
    values = {name: field.default for name, field in SETTINGS.items()}
    values["delayq_web_allowed_hosts"] = ["dashboard.example"]
    values["delayq_web_secret_key"] = "a-fixed-Key-for-every-process"
    return {name: value for name, value in values.items() if value is not None}


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is the answer: an HTTPError with its code


def status(url: str, authorization: str | None = None) -> tuple[int, str]:
    """The code of the answer to a GET, and where it redirects to (if it does)."""
    request = urllib.request.Request(url, headers={"Authorization": authorization or ""})
    try:
        with urllib.request.build_opener(NoRedirects).open(request, timeout=10) as response:
            return int(response.status), ""
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers.get("Location", "")


@pytest.mark.parametrize(
    ("credentials", "authorization", "refused"),
    [
        (BASIC, "Basic " + base64.b64encode(f"ops:{SECRET}".encode()).decode(), (401, "")),
        # With a token only, a browser is sent to the page where the token is typed.
        (TOKEN, f"Bearer {SECRET}", (302, "/login?next=/scheduled")),
    ],
    ids=["username-password", "token"],
)
def test_worker_beat_mover_and_web_start_with_the_web_settings(
    redis_server, redis_client, credentials, authorization, refused
):
    settings = {
        **every_setting_at_its_default(),
        **credentials,
        "beat_schedule": {
            "later": {
                "task": "tests.worker_app.remember",
                "schedule": 1.0,
                "args": ["from beat"],
                "options": {"countdown": 1},
            }
        },
    }
    port = free_port()
    url = f"http://127.0.0.1:{port}/scheduled"
    with celery_process("worker", redis_server.url, settings, "-P", "solo") as worker:
        with celery_process("beat", redis_server.url, settings, ready="beat: Starting"):
            # beat's task waited a second in the store; the worker's mover delivered it.
            wait_until(lambda: runs(redis_client), timeout=30, abort=worker.exited)
        with standalone_mover(redis_server.url, settings):
            pass  # it started: it read the settings, and runs beside the worker's
        with celery_process(
            "delayq",
            redis_server.url,
            settings,
            "web",
            "--port",
            str(port),
            ready="celery-delayq web: serving",
            log_level=None,
        ):
            assert status(url) == refused
            assert status(url, authorization) == (200, "")
    (run,) = runs(redis_client)[:1]
    assert run["label"] == "from beat" and run["eta"] is not None
