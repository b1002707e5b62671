"""The example Django site against a real Redis: its ``CELERY_`` settings, the order view
that schedules a countdown on commit, and the dashboard behind Django's login."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from celery import Celery
from django.test import AsyncClient, Client

import celery_delayq
from celery_delayq import ConfigurationError
from celery_delayq.config.dashboard import WebConfig
from celery_delayq.config.settings import DelayqConfig, config_of

from ..web_links import ACTIONS, Answer, Crawl, Fetch, stocked

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def django_celery_app() -> Celery:
    """A new app read from Django's settings, as the site's celery.py reads them."""
    app = Celery("settings-test", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


def pending(app: Celery) -> int:
    """Delayed messages waiting in the store, all queues."""
    return sum(queue.pending for queue in celery_delayq.backlog(app))


def test_the_sites_celery_settings_are_read_from_the_celery_namespace(site_app):
    assert site_app.conf.broker_transport == "celery_delayq.transport:Transport"
    assert site_app.conf.broker_transport_options == {"visibility_timeout": 60}
    assert config_of(site_app).key_prefix == "shop-delayq"
    assert config_of(site_app).worker_mover is True


def test_celery_delayq_names_in_django_settings_are_the_delayq_settings(settings):
    settings.CELERY_DELAYQ_MOVE_AHEAD = 0.05
    settings.CELERY_DELAYQ_WEB_USERNAME = "ops"
    settings.CELERY_DELAYQ_WEB_PASSWORD = "a-long-Secret-9876"
    settings.CELERY_DELAYQ_WEB_ALLOWED_HOSTS = "shop.example"
    app = django_celery_app()
    assert DelayqConfig.from_app(app).move_ahead == 0.05
    web = WebConfig.from_app(app, environ={})
    assert (web.username, web.password, web.allowed_hosts) == (
        "ops",
        "a-long-Secret-9876",
        "shop.example",
    )


def test_a_misspelt_celery_delayq_name_in_django_settings_is_refused(settings):
    settings.CELERY_DELAYQ_MOVE_AHAED = 0.05
    with pytest.raises(ConfigurationError, match="unknown celery-delayq setting"):
        DelayqConfig.from_app(django_celery_app())


@pytest.mark.django_db(transaction=True)
def test_an_order_schedules_its_confirmation_in_the_store_once_committed(site_app, redis_client):
    response = Client().post("/orders/", {"item": "book"})
    assert response.status_code == 201
    (backlog,) = celery_delayq.backlog(site_app)
    assert (backlog.queue, backlog.pending) == ("celery", 1)
    assert redis_client.keys("shop-delayq*"), "CELERY_DELAYQ_KEY_PREFIX names the store's keys"


def test_a_rolled_back_order_schedules_nothing(site_app):
    from django.db import transaction

    from example_project.django_site.shop.models import Order
    from example_project.django_site.shop.tasks import confirm_order

    with pytest.raises(RuntimeError), transaction.atomic():
        order = Order.objects.create(item="lost")
        transaction.on_commit(lambda: confirm_order.apply_async((order.pk,), countdown=2))
        raise RuntimeError("the order fails")
    assert pending(site_app) == 0


@pytest.fixture
def staff(django_user_model: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("boss", is_staff=True))
    return client


def test_an_anonymous_visitor_is_sent_to_the_login(client, site_app):
    response = client.get("/delayq/scheduled")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/delayq/scheduled"


def test_a_user_who_is_not_staff_is_refused(client, django_user_model, site_app):
    client.force_login(django_user_model.objects.create_user("clerk"))
    assert client.get("/delayq/scheduled").status_code == 403
    assert client.post("/delayq/actions/cancel", {"ids": ["x"]}).status_code == 403


@pytest.mark.promise("web-mounted-keeps-prefix")
def test_staff_see_the_dashboard_with_its_links_under_the_mount(staff, site_app):
    sent = site_app.send_task("shop.nothing", countdown=3600)
    page = staff.get("/delayq/scheduled")
    assert page.status_code == 200
    body = page.content.decode()
    assert sent.id in body
    assert 'href="/delayq/static/' in body, "the stylesheet is served under the mount"
    assert staff.get("/delayq/static/style.css").status_code == 200


@pytest.mark.promise("web-mounted-keeps-prefix")
def test_under_a_script_name_the_links_keep_the_whole_prefix(staff, site_app):
    """A site served under /site (a proxy's SCRIPT_NAME): the pages link below it."""
    page = staff.get("/delayq/scheduled", SCRIPT_NAME="/site")
    assert page.status_code == 200
    assert 'href="/site/delayq/static/' in page.content.decode()


def test_an_unknown_host_is_refused_by_django(staff, site_app):
    assert staff.get("/delayq/scheduled", HTTP_HOST="attacker.example").status_code == 400


def test_a_csrf_protected_action_works_through_django(staff, site_app):
    sent = site_app.send_task("shop.nothing", countdown=3600)
    body = staff.get("/delayq/scheduled").content.decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    form = {"ids": [sent.id], "confirmed": "yes", "next": "/delayq/scheduled"}

    refused = staff.post("/delayq/actions/cancel", form)
    assert refused.status_code == 400 and "could not be checked" in refused.content.decode()
    assert pending(site_app) == 1

    done = staff.post("/delayq/actions/cancel", {**form, "csrf_token": token})
    assert done.status_code == 302
    assert done["Location"] == "/delayq/scheduled"
    assert pending(site_app) == 0
    assert "Cancelled 1" in staff.get(done["Location"]).content.decode()


def django_fetch(client: Client, script_name: str = "") -> Fetch:
    """Requests through Django's test client, the site served under ``script_name``."""

    def fetch(method: str, url: str, fields: list[tuple[str, str]]) -> Answer:
        path, extra = url.removeprefix(script_name), {"SCRIPT_NAME": script_name}
        if method == "get":
            response = client.get(path, **extra)
        else:
            data: dict[str, list[str]] = {}
            for name, value in fields:
                data.setdefault(name, []).append(value)
            response = client.post(path, data, **extra)
        return Answer(response.status_code, response.get("Location"), response.content.decode())

    return fetch


@pytest.mark.parametrize("script_name", ["", "/site"])
@pytest.mark.promise("web-mounted-keeps-prefix", "django-dashboard-under-its-mount")
def test_every_link_form_and_redirect_keeps_the_mount(staff, site_app, script_name):
    """Every page crawled, every action confirmed on its confirmation page, with the site
    at the root and under a proxy's SCRIPT_NAME."""
    stocked(site_app, "example_project.django_site.shop.tasks.confirm_order")
    mount = f"{script_name}/delayq"
    crawl = Crawl(django_fetch(staff, script_name), mount)
    crawl.pages(f"{mount}/")
    crawl.forms()
    assert crawl.strays == []
    assert {path.removeprefix(mount) for path in crawl.posted()} >= ACTIONS | {"/doctor"}


def asgi_fetch(client: AsyncClient) -> Fetch:
    """Requests through Django's ASGI handler (its async test client)."""

    def fetch(method: str, url: str, fields: list[tuple[str, str]]) -> Answer:
        data: dict[str, list[str]] = {}
        for name, value in fields:
            data.setdefault(name, []).append(value)
        answer = client.get(url) if method == "get" else client.post(url, data)
        response = asyncio.run(answer)
        return Answer(response.status_code, response.get("Location"), response.content.decode())

    return fetch


@pytest.mark.django_db(transaction=True)
@pytest.mark.promise("django-dashboard-under-its-mount")
def test_served_over_asgi_every_page_and_action_works(django_user_model, site_app):
    """Django over ASGI hands the view a request without the WSGI keys the pages need."""
    login = Client()  # AsyncClient.aforce_login is Django 5.0+; the session cookie works for both
    login.force_login(django_user_model.objects.create_user("boss", is_staff=True))
    staff = AsyncClient()
    staff.cookies = login.cookies
    stocked(site_app, "example_project.django_site.shop.tasks.confirm_order")
    crawl = Crawl(asgi_fetch(staff), "/delayq")
    crawl.pages("/delayq/")
    crawl.forms()
    assert crawl.strays == []
    assert {status for _, _, status in crawl.requests} <= {200, 302, 400}
    assert {path.removeprefix("/delayq") for path in crawl.posted()} >= ACTIONS | {"/doctor"}
