"""The web dashboard's HTTP layer (Flask's test client) against a real Redis: pages,
filters and paging, actions with their confirmations and CSRF, read-only mode, auth,
escaping, and a store outage. Clicking through it in a browser is in
tests/web/test_web_browser.py."""

from __future__ import annotations

import base64
import gc
import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from kombu import Queue

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import RedisServer, wait_until
from celery_delayq.web import create_app, views
from celery_delayq.web.guard.access import Access, AddressRefused, access_of, check_address
from celery_delayq.web.sampler import THREAD

from ..brokers.amqp.test_amqp_operations import dead_lettered, orphans
from ..helpers import invoke, noop_task
from .listing import next_page

pytestmark = pytest.mark.integration

flask = pytest.importorskip("flask")
DispatcherMiddleware = pytest.importorskip("werkzeug.middleware.dispatcher").DispatcherMiddleware

XSS = "<script>alert('owned')</script>"
STRONG = "correct-horse-battery-staple-42"  # a secret strong enough to serve beyond loopback


def page_title(response: Any) -> str:
    found = re.search(r"<h1>(.*?)</h1>", response.get_data(as_text=True), re.S)
    return found.group(1).strip() if found else ""


def flashes(response: Any) -> list[str]:
    return re.findall(r'class="flash[^"]*"[^>]*>(.*?)</p>', response.get_data(as_text=True))


def listed_ids(response: Any) -> list[str]:
    return re.findall(r'name="ids" value="([^"]+)"', response.get_data(as_text=True))


def csrf_token(client: Any, path: str = "/scheduled") -> str:
    body = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]


def post(client: Any, path: str, confirmed: bool = True, **form: Any) -> Any:
    data = {"csrf_token": csrf_token(client), "next": "/scheduled", **form}
    if confirmed:
        data["confirmed"] = "yes"
    return client.post(path, data=data)


def pending_ids(app: Celery) -> list[str]:
    with open_store(app) as store:
        return [m.task_id for m in store.pending(limit=10_000)]


@pytest.fixture
def schedule(app: Celery) -> Callable[..., str]:
    task = noop_task(app)

    def schedule(*args: Any, countdown: float = 600, queue: str | None = None) -> str:
        options = {"queue": queue} if queue else {}
        return str(task.apply_async(args, countdown=countdown, **options).id)

    return schedule


def test_overview_shows_queues_timeline_movers_and_doctor(app, schedule, client) -> None:
    for n in range(3):
        schedule(n, countdown=120 + n)
    schedule("b", queue="billing", countdown=3000)
    with open_store(app) as store:
        store.movers.beat(
            "m1",
            {
                "id": "m1",
                "name": "celery@web-1",
                "host": "web-1",
                "pid": 42,
                "moved": 7,
                "last_seen": store.server_time_ms() / 1000,
            },
        )

    response = client.get("/?range=hour")
    body = response.get_data(as_text=True)

    assert response.status_code == 200
    queue = app.conf.task_default_queue
    assert re.search(rf">{queue}</a></td>\s*<td class=\"num\">3</td>", body)
    assert re.search(r">billing</a></td>\s*<td class=\"num\">1</td>", body)
    assert "4 due in the next hour" in body  # the timeline counts what falls due
    assert body.count('class="bar"') == 60 and "<svg" in body
    assert "web-1" in body and "alive" in body
    assert "<strong>redis version</strong>" in body  # the doctor's findings, with fixes
    assert "<strong>persistence</strong>" in body and "Fix: " in body
    assert '<meta http-equiv="refresh" content="10">' in body
    assert "http-equiv" not in client.get("/?refresh=0").get_data(as_text=True)
    assert client.get("/?range=year").status_code == 400


def test_scheduled_lists_in_due_order_and_filters(app, schedule, client) -> None:
    late = schedule("late", countdown=900)
    early = schedule("early user 42", countdown=60)
    billing = schedule("invoice", queue="billing", countdown=300)
    keyed = celery_delayq.debounce(noop_task(app), ("edit",), key="user:42", countdown=120).id

    assert listed_ids(client.get("/scheduled")) == [early, keyed, billing, late]
    assert listed_ids(client.get("/scheduled?queue=billing")) == [billing]
    assert listed_ids(client.get("/scheduled?q=USER%2042")) == [early]  # any case
    assert listed_ids(client.get("/scheduled?key=user:42")) == [keyed]
    assert listed_ids(client.get("/scheduled?task=tests.noop&before=10m")) == [
        early,
        keyed,
        billing,
    ]
    assert listed_ids(client.get("/scheduled?after=2m&before=6m")) == [billing]
    assert listed_ids(client.get("/scheduled?task=other.task")) == []


@pytest.mark.parametrize(
    "query, says",
    [
        ("after=tomorrow", "due after: 'tomorrow' is neither ISO 8601"),
        ("from=x.y", "not a listing position"),
        ("from=1.999999999", "not a listing position"),  # the old cursor form
    ],
)
@pytest.mark.promise("web-query-checked")
def test_a_bad_filter_says_what_is_wrong(client, query: str, says: str) -> None:
    response = client.get(f"/scheduled?{query}")
    assert response.status_code == 400
    assert page_title(response) == "That filter cannot be read"
    assert says in response.get_data(as_text=True).replace("&#39;", "'")


def test_paging_walks_every_task_once_in_due_order(app, client) -> None:
    """120 tasks, 70 of them due in the same millisecond (the cursor names the last task
    key shown, and the next page starts after it)."""
    task = noop_task(app)
    due = datetime.now(timezone.utc) + timedelta(seconds=60)
    same_ms = [str(task.apply_async((n,), eta=due).id) for n in range(70)]
    others = [str(task.apply_async((n,), countdown=120 + n).id) for n in range(50)]

    seen, url = [], "/scheduled"
    for _ in range(200):  # 3 full pages; more when the machine's load cuts pages short
        response = client.get(url)
        seen += listed_ids(response)
        url = next_page(response)
        if url is None:
            break
    assert sorted(seen[:70]) == sorted(same_ms) and seen[70:] == others
    assert len(seen) == len(set(seen)) == 120


def test_a_rare_match_gives_what_the_scan_budget_found_and_searches_further(
    app, client, monkeypatch
) -> None:
    task = noop_task(app)
    for n in range(30):
        task.apply_async((n,), countdown=60 + n)
    needle = str(task.apply_async(("needle",), countdown=600).id)
    monkeypatch.setattr(views, "SCAN_BUDGET", 10)
    monkeypatch.setattr(views, "SCAN_SECONDS", None)  # the count alone, on any machine

    response = client.get("/scheduled?q=needle")
    assert listed_ids(response) == []
    assert "Looked at 10 tasks" in response.get_data(as_text=True)
    for _ in range(5):  # follow "Search further" to it
        found = re.search(r'href="([^"]+)">Search further', response.get_data(as_text=True))
        assert found, "the search stopped before the match"
        response = client.get(found.group(1).replace("&amp;", "&"))
        if listed_ids(response):
            break
    assert listed_ids(response) == [needle]


def test_task_page_shows_everything_about_it(app, client) -> None:
    task = noop_task(app)
    long_text = "x" * 1000
    task_id = task.apply_async(({"user": 42, "tags": ["a", "b"]}, long_text), countdown=90).id

    body = client.get(f"/task/{task_id}").get_data(as_text=True)

    assert "tests.noop" in body and task_id in body
    assert "in 1.5m" in body or "in 1.4m" in body  # relative ETA beside the absolute one
    assert "&#39;user&#39;: 42" in body
    assert "<details>" in body  # the long value is folded
    assert "<dt>retries</dt><dd>0</dd>" in body.replace("\n", "")
    assert "argsrepr" in body  # headers listed


def test_an_unknown_task_id_is_a_clear_404(client) -> None:
    response = client.get("/task/no-such-task")
    assert response.status_code == 404
    assert page_title(response) == "No pending task with that id"


@pytest.mark.promise("web-values-escaped")
def test_task_arguments_are_escaped_everywhere(app, schedule, client) -> None:
    task_id = schedule(XSS, countdown=60)
    celery_delayq.debounce(noop_task(app), (XSS,), key=XSS, countdown=60)
    for path in ("/scheduled", f"/task/{task_id}", f"/scheduled?q={XSS}", f"/scheduled?key={XSS}"):
        body = client.get(path).get_data(as_text=True)
        assert "<script>" not in body, path
        assert "&lt;script&gt;" in body, path


def test_cancel_asks_first_then_cancels_and_a_second_submit_is_harmless(
    app, schedule, client
) -> None:
    ids = [schedule(n, countdown=600 + n) for n in range(3)]

    confirm = post(client, "/actions/cancel", confirmed=False, ids=ids[:2])
    assert page_title(confirm) == "Cancel 2 tasks?"
    assert pending_ids(app) == ids  # nothing changed yet

    done = post(client, "/actions/cancel", ids=ids[:2])
    assert done.status_code == 302 and done.location.endswith("/scheduled")
    assert flashes(client.get("/scheduled")) == ["Cancelled 2 tasks."]
    assert pending_ids(app) == ids[2:]

    again = post(client, "/actions/cancel", ids=ids[:2])
    assert again.status_code == 302
    assert flashes(client.get("/scheduled")) == [
        "Cancelled 0 tasks; 2 no longer pending (already run, moved or cancelled)."
    ]


def test_acting_on_all_that_match_says_how_many(app, schedule, client) -> None:
    keep = schedule("keep", queue="billing")
    matching = [schedule(f"drop {n}") for n in range(4)]

    queue = app.conf.task_default_queue
    confirm = post(client, "/actions/cancel", confirmed=False, scope="all", queue=queue)
    assert page_title(confirm) == "Cancel 4 tasks?"
    searched = post(client, "/actions/cancel", confirmed=False, scope="all", q="drop 1")
    assert page_title(searched) == "Cancel 1 task?"

    post(client, "/actions/cancel", scope="all", q="drop 1")  # a scan, then a cancel each
    assert flashes(client.get("/scheduled")) == ["Cancelled 1 task."]
    assert sorted(pending_ids(app)) == sorted([keep, *matching[:1], *matching[2:]])
    post(client, "/actions/cancel", scope="all", queue=queue)  # the whole queue: a purge
    assert flashes(client.get("/scheduled")) == ["Cancelled 3 tasks."]
    assert pending_ids(app) == [keep]


def test_reschedule_sets_the_new_eta_and_refuses_a_bad_one(app, schedule, client) -> None:
    task_id = schedule("x", countdown=600)
    response = post(client, "/actions/reschedule", ids=[task_id], eta="2h")
    assert response.status_code == 302
    with open_store(app) as store:
        (message,) = store.find(task_id)
        assert 7100 < message.due - store.server_time_ms() / 1000 < 7300

    bad = post(client, "/actions/reschedule", ids=[task_id], eta="soonish")
    assert bad.status_code == 400 and "soonish" in bad.get_data(as_text=True)
    too_far = post(client, "/actions/reschedule", ids=[task_id], eta="99999999999d")
    assert too_far.status_code == 400 and "further away" in too_far.get_data(as_text=True)
    empty = post(client, "/actions/reschedule", ids=[task_id], eta="")
    assert empty.status_code == 400 and "give the new ETA" in empty.get_data(as_text=True)


def test_promote_hands_the_task_to_its_queue_now(app, schedule, client, redis_client) -> None:
    task_id, other = schedule("now"), schedule("later")
    post(client, "/actions/promote", ids=[task_id])
    assert pending_ids(app) == [other]
    (queued,) = redis_client.lrange(app.conf.task_default_queue, 0, -1)
    assert task_id.encode() in queued


def test_nothing_selected_is_a_clear_400(client) -> None:
    response = post(client, "/actions/cancel")
    assert response.status_code == 400 and page_title(response) == "Nothing selected"


@pytest.mark.promise("security-web-csrf", "web-actions-need-csrf")
def test_a_post_without_the_csrf_token_is_refused(app, schedule, client) -> None:
    task_id = schedule("x")
    response = client.post("/actions/cancel", data={"ids": [task_id], "confirmed": "yes"})
    assert response.status_code == 400
    assert page_title(response) == "The form could not be checked"
    assert pending_ids(app) == [task_id]


@pytest.mark.promise("security-web-read-only", "web-read-only-refuses-actions")
def test_read_only_shows_tasks_and_refuses_every_action(app, schedule) -> None:
    task_id = schedule("x")
    client = create_app(app, read_only=True, access=Access()).test_client()
    body = client.get("/scheduled").get_data(as_text=True)
    assert task_id in body and "read-only" in body
    assert 'name="ids"' not in body and "Cancel" not in body
    token = re.search(
        r'name="csrf_token" value="([^"]+)"', client.get("/login").get_data(as_text=True)
    )
    for path in ("/actions/cancel", "/actions/promote", "/dead/drop"):
        data = {"ids": [task_id], "confirmed": "yes", "csrf_token": token.group(1)}
        response = client.post(path, data=data)
        assert response.status_code == 403, path
        assert "read-only" in response.get_data(as_text=True)
    assert pending_ids(app) == [task_id]


def test_basic_auth_guards_every_page(app) -> None:
    client = create_app(app, access=Access("ops", "pa55word")).test_client()
    for path in ("/", "/scheduled", "/dead", "/doctor", "/task/x", "/limits"):
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.headers["WWW-Authenticate"].startswith("Basic")
    wrong = base64.b64encode(b"ops:nope").decode()
    assert client.get("/", headers={"Authorization": f"Basic {wrong}"}).status_code == 401
    right = base64.b64encode(b"ops:pa55word").decode()
    assert client.get("/scheduled", headers={"Authorization": f"Basic {right}"}).status_code == 200


def test_a_token_works_as_bearer_or_through_the_login_page(app) -> None:
    client = create_app(app, access=Access(token="t0ken")).test_client()
    assert client.get("/scheduled").status_code == 302  # to the login page
    assert client.get("/scheduled", headers={"Authorization": "Bearer t0ken"}).status_code == 200
    assert client.get("/scheduled", headers={"Authorization": "Bearer nope"}).status_code == 302

    login = client.get("/login?next=/scheduled").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', login).group(1)  # type: ignore[union-attr]
    failed = client.post(
        "/login", data={"token": "nope", "csrf_token": token, "next": "/scheduled"}
    )
    assert failed.status_code == 401
    done = client.post(
        "/login", data={"token": "t0ken", "csrf_token": token, "next": "//evil.example"}
    )
    assert done.status_code == 302 and done.location == "/"  # never to another site
    assert client.get("/scheduled").status_code == 200


def test_credentials_come_from_settings_or_the_environment(make_app) -> None:
    app = make_app(delayq_web_username="ops", delayq_web_password="from-settings")
    assert access_of(app, {}) == Access("ops", "from-settings")
    assert access_of(app, {"DELAYQ_WEB_PASSWORD": "from-env"}).password == "from-env"
    assert access_of(make_app(), {"DELAYQ_WEB_TOKEN": "t"}) == Access(token="t")
    with pytest.raises(ValueError, match="both"):
        access_of(make_app(delayq_web_username="ops"), {})


@pytest.mark.parametrize("address", ["0.0.0.0", "192.168.1.10", "::", "dashboard.internal"])
@pytest.mark.promise("security-web-auth-beyond-loopback", "web-loopback-unless-authenticated")
def test_listening_beyond_this_machine_needs_authentication(address: str) -> None:
    with pytest.raises(AddressRefused, match="without authentication"):
        check_address(address, Access())
    check_address(address, Access("ops", STRONG))
    check_address(address, Access(token=STRONG))
    for loopback in ("127.0.0.1", "::1", "localhost"):
        check_address(loopback, Access())


@pytest.mark.promise("security-web-auth-beyond-loopback", "web-loopback-unless-authenticated")
def test_the_web_command_refuses_a_public_address_without_authentication(app) -> None:
    result = invoke(app, "web", "--address", "0.0.0.0", "--port", "1")
    assert result.exit_code != 0
    assert "refusing to listen on 0.0.0.0 without authentication" in result.output


@pytest.mark.promise("urls-shown-without-passwords", "web-url-without-password")
def test_the_broker_password_is_never_shown(make_app, redis_client, redis_server) -> None:
    redis_client.acl_setuser(
        "web",
        enabled=True,
        passwords=["+s3cret-pw"],
        categories=["+@all"],
        keys=["*"],
        channels=["*"],
    )
    try:
        app = make_app(url=f"redis://web:s3cret-pw@127.0.0.1:{redis_server.port}/0")
        noop_task(app).apply_async((1,), countdown=60)
        client = create_app(app, access=Access()).test_client()
        for path in ("/", "/scheduled", "/doctor", "/dead", "/limits"):
            response = client.get(path)
            assert response.status_code == 200, path
            assert "s3cret-pw" not in response.get_data(as_text=True), path
    finally:
        redis_client.acl_deluser("web")


@pytest.mark.promise("web-redis-outage-503")
def test_a_redis_outage_is_a_clear_503(make_app) -> None:
    with RedisServer() as server:
        app = make_app(
            url=server.url, broker_connection_retry=False, broker_connection_max_retries=0
        )
        client = create_app(app, access=Access()).test_client()
        assert client.get("/scheduled").status_code == 200
        server.stop(kill=True)
        for path in ("/scheduled", "/", "/task/x"):
            response = client.get(path)
            assert response.status_code == 503, path
            assert page_title(response) == "The delayed store is unreachable"


@pytest.mark.promise("web-mounted-keeps-prefix")
def test_mounted_under_a_prefix_every_link_and_redirect_keeps_it(app, schedule) -> None:
    host = flask.Flask("host")
    host.wsgi_app = DispatcherMiddleware(
        host.wsgi_app, {"/delayq": create_app(app, access=Access())}
    )  # type: ignore[method-assign]
    client = host.test_client()
    task_id = schedule("x")
    body = client.get("/delayq/scheduled").get_data(as_text=True)
    assert f'href="/delayq/task/{task_id}"' in body and 'href="/delayq/static/style.css"' in body
    token = re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    done = client.post(
        "/delayq/actions/cancel",
        data={
            "ids": [task_id],
            "confirmed": "yes",
            "csrf_token": token,
            "next": "/delayq/scheduled",
        },
    )
    assert done.status_code == 302 and done.location == "/delayq/scheduled"


def test_the_moves_chart_shows_what_the_store_moved(app, schedule) -> None:
    web = create_app(app, access=Access())
    sampler = web.extensions["celery_delayq"].sampler
    sampler.sample()
    for n in range(5):
        schedule(n, countdown=0.2)
    with open_store(app) as store:
        last_due = store.pending(newest_first=True, limit=1)[0].due_ms
        wait_until(lambda: store.server_time_ms() > last_due, what="all 5 due")
        assert store.move_all_due().moved == 5
    sampler.sample()

    body = web.test_client().get("/").get_data(as_text=True)
    assert 'aria-label="Moved per second"' in body and 'aria-label="Move lateness"' in body
    assert re.search(r"<title>\d\d:\d\d: [\d.]+ /s</title>", body)  # one interval, with moves


def test_dead_letters_are_listed_then_dropped_or_sent_again(make_amqp_app) -> None:
    app = make_amqp_app(delayq_handover_tries=1)
    dropped, resent = dead_lettered(app), dead_lettered(app)
    client = create_app(app, access=Access()).test_client()
    body = client.get("/dead").get_data(as_text=True)
    assert dropped.id in body and resent.id in body and "unroutable: " in body
    token = csrf_token(client, "/dead")

    confirm = client.post("/dead/drop", data={"ids": [dropped.id], "csrf_token": token})
    assert page_title(confirm) == "Drop 1 dead letter?"
    form = {"ids": [dropped.id], "csrf_token": token, "confirmed": "yes"}
    done = client.post("/dead/drop", data=form)
    assert done.status_code == 302 and done.location.endswith("/dead")
    assert flashes(client.get("/dead")) == ["Dropped 1 dead letter."]

    target = Queue(f"found-{orphans(app).name}", orphans(app), routing_key="r")
    with app.connection_for_write() as connection:
        target(connection.default_channel).declare()  # the cause, fixed
    form = {"scope": "all", "csrf_token": token, "confirmed": "yes"}
    assert client.post("/dead/resend", data=form).status_code == 302
    assert flashes(client.get("/dead")) == ["Sent again 1 dead letter."]
    with app.connection_for_write() as connection:
        message = connection.default_channel.basic_get(target.name, no_ack=True)
    assert message is not None and message.headers["id"] == resent.id
    assert celery_delayq.backlog(app)[0].dead == 0


def test_a_dropped_dashboard_stops_reading_redis(app) -> None:
    """The sampler's thread ends once its dashboard is gone: a process that builds and
    drops dashboards (a test suite, an app factory) keeps none reading Redis."""
    before = set(threading.enumerate())
    web = create_app(app, access=Access(), sample_every=0.05)
    assert web.test_client().get("/").status_code == 200
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name == THREAD]
    del web
    gc.collect()  # the Flask app holds reference cycles
    wait_until(lambda: not thread.is_alive(), timeout=10, what="the sampler's thread ended")
