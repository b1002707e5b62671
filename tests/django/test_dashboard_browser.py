"""Every dashboard action clicked through in chromium with the dashboard mounted in the
example Django site (``dashboard_urls`` at /delayq/), served by a real server
(pytest-django's live server), behind the Django staff login, with a real worker started
from the site's settings: the same clicks as under a WSGI prefix
(tests/web/test_web_mounted_browser.py), and their effect on the shop's orders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until
from example_project.django_site.shop.models import Order
from example_project.django_site.shop.tasks import confirm_order

from ..helpers import chromium
from ..web.test_web_mounted_browser import ENTRY, LABELS, click_every_action
from ..web_links import dead_letter
from .test_site_worker import confirmed, site_process

pytestmark = [
    pytest.mark.system,
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.django_db(transaction=True),
]

PASSWORD = "a-long-Secret-9876"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Playwright's sync API runs an event loop in this thread, where Django refuses its
    ORM unless told the calls are safe (they are: nothing here is async)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with chromium() as browser:
            yield browser


@pytest.mark.promise("django-dashboard-under-its-mount")
def test_every_action_works_in_the_django_site(
    site_app, redis_server, live_server, django_user_model, browser
):
    django_user_model.objects.create_user("boss", password=PASSWORD, is_staff=True)
    orders = {label: Order.objects.create(item=label) for label in (*LABELS, "periodic")}
    ids = {
        label: confirm_order.apply_async((orders[label].pk,), countdown=3600).id for label in LABELS
    }
    dead_letter(site_app, ids["resend"])
    periodic.upsert(site_app, ENTRY, confirm_order.name, 3600, args=[orders["periodic"].pk])
    ran = ("promote", "reschedule", "resend", "periodic")
    with site_process(
        redis_server.url, "worker", "-l", "info", "-c", "1", "--without-mingle", ready="ready."
    ) as worker:
        page = browser.new_page()
        base = f"{live_server.url}/delayq"
        page.goto(f"{base}/scheduled")  # the staff login first
        assert page.url == f"{live_server.url}/admin/login/?next=/delayq/scheduled"
        page.fill("#id_username", "boss")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        assert page.url == f"{base}/scheduled"

        click_every_action(page, base, ids, ENTRY)
        wait_until(
            lambda: all(confirmed(orders[label].pk) for label in ran),
            timeout=60,
            abort=worker.exited,
            what="the promoted, rescheduled, resent and periodic orders confirmed",
        )
    assert not confirmed(orders["cancel"].pk)
    with open_store(site_app) as store:
        assert store.find(ids["cancel"]) == []
