"""The web dashboard against a hostile browser and hostile input (issue 25, findings 4,
6-10 and the ``after=`` half of 11), with a real Redis and real stored tasks.

How much Redis work a request does is read from Redis itself: the bytes it sent
(``INFO stats`` total_net_output_bytes) and the commands it ran (``INFO commandstats``)
between just before and just after the request.
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kombu
import pytest
import redis
from celery import Celery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import celery_delayq
from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.ops import browse
from celery_delayq.web import create_app, views
from celery_delayq.web.app import make_web_server
from celery_delayq.web.guard.access import Access, AddressRefused, check_address

from ..helpers import invoke, noop_task
from .listing import cut_short, next_page

pytestmark = pytest.mark.adversarial

pytest.importorskip("flask")

STRONG = "correct-horse-battery-staple-42"
TIE = 3000  # tasks due in one millisecond


def csrf_token(client: Any, path: str = "/scheduled") -> str:
    body = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]


def listed_ids(response: Any) -> list[str]:
    return re.findall(r'href="/task/([^"]+)"', response.get_data(as_text=True))


class RedisWork:
    """What Redis did between two readings: bytes sent and commands run."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def reading(self) -> tuple[int, int]:
        sent = int(self.client.info("stats")["total_net_output_bytes"])
        calls = sum(int(s["calls"]) for s in self.client.info("commandstats").values())
        return sent, calls

    def during(self, action: Callable[[], Any]) -> tuple[Any, int, int]:
        """``action``'s result, the bytes Redis sent and the commands it ran meanwhile
        (INFO's own replies included: a few kB, a few calls)."""
        sent, calls = self.reading()
        result = action()
        sent_after, calls_after = self.reading()
        return result, sent_after - sent, calls_after - calls


@pytest.fixture
def tie(app: Celery) -> list[str]:
    """TIE tasks due in the same millisecond, each with a 200-byte argument, and a few
    later ones; their ids in listing order."""
    task = noop_task(app)
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    calls = (((n, "x" * 200), {}, {"eta": due}) for n in range(TIE))
    celery_delayq.schedule_many(task, calls)
    for n in range(5):
        task.apply_async((n,), countdown=7200 + n)
    with open_store(app) as store:
        return [m.task_id for m in store.pending(limit=TIE + 10)]


# -- finding 4: one request reads at most a page ------------------------------------------


@pytest.mark.promise(
    "security-web-bounded-reads", "web-request-reads-bounded", "web-crafted-cursor-refused"
)
def test_a_crafted_cursor_cannot_make_a_request_read_the_store(client, tie, redis_client) -> None:
    """``from=0.100000`` asked the old cursor to skip 100,000 messages of one ms: one
    request read all TIE of them (about 1 MB here). It is no cursor a page writes."""
    response, sent, _ = RedisWork(redis_client).during(
        lambda: client.get("/scheduled?from=0.100000")
    )
    assert response.status_code == 400
    assert "not a listing position" in response.get_data(as_text=True)
    assert sent < 100_000, f"one request made Redis send {sent:,} bytes"


@pytest.mark.promise("security-web-bounded-reads", "web-request-reads-bounded")
def test_paging_through_a_tie_reads_one_page_per_request(client, tie, redis_client) -> None:
    """Keyset paging: every page of the TIE tasks due in one ms (deep ones too) costs
    about one page of reads, and the pages walk every task once, in order."""
    work = RedisWork(redis_client)
    seen: list[str] = []
    url: str | None = "/scheduled"
    costs = []
    while url is not None and len(seen) < 400:  # 8 pages in: as costly as the 60th
        response, sent, calls = work.during(lambda u=url: client.get(u))
        assert response.status_code == 200
        costs.append((sent, calls, cut_short(response)))
        seen += listed_ids(response)
        url = next_page(response)
    assert len(seen) >= 400 and seen == tie[: len(seen)]  # a page cut short by its budget too
    page_bytes = max(sent for sent, _, _ in costs)
    assert page_bytes < 150_000, costs  # 51 messages of ~1 kB, not thousands
    # a page cut short by its time budget (a loaded machine) also looks further: one scan more
    assert all(calls < (60 if cut else 40) for _, calls, cut in costs), costs
    # a page as deep as the last: the cursor of the last task but one
    with open_store(client.application.extensions["celery_delayq"].celery) as store:
        last_but_one = store.pending(limit=TIE)[TIE - 2].position
    response, sent, _ = work.during(
        lambda: client.get(f"/scheduled?from={browse.Cursor.encode(last_but_one)}")
    )
    assert listed_ids(response)[:1] == [tie[TIE - 1]] and sent < 150_000


@pytest.mark.promise("web-full-check-only-on-post")
def test_the_doctor_page_does_not_read_the_store_on_a_get(client, tie, redis_client) -> None:
    """A GET shows Redis and the movers; the full check (every record) is a POST, kept."""
    response, sent, _ = RedisWork(redis_client).during(lambda: client.get("/doctor"))
    assert response.status_code == 200 and sent < 100_000, sent
    body = response.get_data(as_text=True)
    assert "Run the full check" in body and "records, schedule" not in body

    token = csrf_token(client, "/doctor")
    assert client.post("/doctor").status_code == 400  # no CSRF token: no full check
    done = client.post("/doctor", data={"csrf_token": token})
    assert done.status_code == 302 and done.location == "/doctor"
    body = client.get("/doctor").get_data(as_text=True)
    assert "Last full check" in body and "records, schedule and duplicate listings agree" in body


@pytest.mark.promise("web-huge-repr-cut")
def test_a_huge_argsrepr_is_shown_cut_not_parsed(make_app, redis_client) -> None:
    """A 2 MB argsrepr took 8.7 s and 971 MB to lay out; now the page shows its start
    and says how long it is (such a message is stored with delayq_max_message_size 0)."""
    app = make_app(delayq_max_message_size=0)
    client = create_app(app, access=Access()).test_client()
    huge = ["y" * 100] * 20_000  # a literal list of 2 MB, as a client may send its repr
    task_id = noop_task(app).apply_async((1,), countdown=600, argsrepr=repr(huge)).id
    response = client.get(f"/task/{task_id}")
    body = response.get_data(as_text=True)
    assert response.status_code == 200
    assert "characters in all; the rest is not shown" in body
    assert len(body) < 200_000  # not the 2 MB repr, twice (args and the header)
    assert views.pretty_repr(repr(huge)) == repr(huge)  # not parsed: shown as it is


# -- finding 6: DNS rebinding ---------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:5557", "localhost.attacker.example", "", "a b"]
)
@pytest.mark.promise("security-web-host-check", "web-answers-only-known-hosts")
def test_a_foreign_host_header_is_refused(client, host: str) -> None:
    for path in ("/", "/scheduled", "/login", "/doctor", "/periodic", "/limits"):
        response = client.get(path, headers={"Host": host})
        assert response.status_code == 400, (host, path)
        assert "csrf_token" not in response.get_data(as_text=True)


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:5557", "127.0.0.1:5557", "[::1]:5557", "LOCALHOST.", "10.1.2.3"],
)
@pytest.mark.promise("web-answers-only-known-hosts")
def test_loopback_names_and_addresses_are_answered(client, host: str) -> None:
    assert client.get("/scheduled", headers={"Host": host}).status_code == 200


@pytest.mark.promise("security-web-host-check", "web-answers-only-known-hosts")
def test_the_names_a_proxy_serves_it_under_come_from_a_setting(make_app) -> None:
    app = make_app(delayq_web_allowed_hosts="ops.example.com, delayq.internal")
    client = create_app(app, access=Access()).test_client()
    assert client.get("/scheduled", headers={"Host": "ops.example.com"}).status_code == 200
    assert client.get("/scheduled", headers={"Host": "delayq.internal:443"}).status_code == 200
    assert client.get("/scheduled", headers={"Host": "evil.example.com"}).status_code == 400


@pytest.mark.promise("security-web-host-check", "web-answers-only-known-hosts")
def test_the_server_answers_its_bind_name(make_app) -> None:
    server = make_web_server(make_app(), "localhost", 0)
    try:
        client = server.app.test_client()  # type: ignore[attr-defined]
        assert client.get("/", headers={"Host": "localhost:1"}).status_code == 200
        assert client.get("/", headers={"Host": "rebound.example"}).status_code == 400
    finally:
        server.server_close()


@pytest.mark.promise("web-mounted-without-credentials-warns")
def test_mounting_without_credentials_warns(app, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="celery_delayq.web"):
        create_app(app, access=Access())
    assert "has no credentials" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="celery_delayq.web"):
        create_app(app, access=Access(token=STRONG))
    assert "has no credentials" not in caplog.text


# -- finding 7: redirects stay on this site -------------------------------------------------

HOSTILE_NEXT = [
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r\n/evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "/\\/evil.example",
    "//evil.example",
    "///evil.example",
    " //evil.example",
    "https://evil.example",
    "http:evil.example",
    "javascript:alert(document.domain)",
    "JaVaScRiPt:alert(1)",
    "/\x00/evil.example",
    "/\u200b/evil.example",
    "/\u3000/evil.example",
    "data:text/html,<script>alert(1)</script>",
    "evil.example",
]


def lands_on_another_site(location: str) -> bool:
    """Whether a browser following ``location`` leaves this site: it drops tabs and
    newlines, reads backslashes as slashes, and trims spaces and control characters."""
    seen = re.sub(r"[\t\r\n]", "", location).replace("\\", "/").strip(" \x00-\x1f")
    parts = urlsplit(seen)
    return bool(parts.scheme or parts.netloc or seen.startswith("//"))


@pytest.mark.parametrize("target", HOSTILE_NEXT)
@pytest.mark.promise("web-redirects-stay-on-site")
def test_a_token_login_never_redirects_to_another_site(app, target: str) -> None:
    client = create_app(app, access=Access(token=STRONG)).test_client()
    done = client.post(
        "/login", data={"token": STRONG, "csrf_token": csrf_token(client, "/login"), "next": target}
    )
    assert done.status_code == 302
    assert not lands_on_another_site(done.location), done.location


@pytest.mark.parametrize("target", HOSTILE_NEXT)
@pytest.mark.promise("web-redirects-stay-on-site")
def test_an_action_never_redirects_to_another_site(app, client, target: str) -> None:
    task_id = noop_task(app).apply_async((1,), countdown=600).id
    done = client.post(
        "/actions/promote",
        data={
            "ids": [task_id],
            "confirmed": "yes",
            "csrf_token": csrf_token(client),
            "next": target,
        },
    )
    assert done.status_code == 302
    assert not lands_on_another_site(done.location), done.location


@pytest.mark.parametrize("target", ["/scheduled?queue=a&q=user+42", "/task/abc", "/"])
@pytest.mark.promise("web-redirects-stay-on-site")
def test_a_path_on_this_site_is_kept(app, target: str) -> None:
    assert views.safe_next(target) == target


# -- finding 8: headers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/scheduled", "/dead", "/doctor", "/login", "/task/x", "/periodic", "/limits"]
)
@pytest.mark.promise("security-web-headers", "web-security-headers")
def test_every_page_carries_the_security_headers(client, path: str) -> None:
    headers = client.get(path).headers
    csp = headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "script-src" not in csp  # no script at all
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"


@pytest.mark.promise("web-security-headers")
def test_no_page_has_script_a_policy_would_block(app, client, tie) -> None:
    """The policy allows no script: so no page may carry any (a browser check of the
    same, with no console violations, is in tests/web/test_web_browser.py)."""
    periodic.upsert(app, "<b>entry</b>", "tests.noop", 60)  # its row has the action forms
    pages = ["/", "/scheduled", "/dead", "/doctor", "/login", f"/task/{tie[0]}", "/task/x"]
    for path in [*pages, "/periodic", "/limits"]:
        body = client.get(path).get_data(as_text=True).lower()
        assert "<script" not in body and "javascript:" not in body, path
        assert not re.search(r"\son[a-z]+=", body) and " style=" not in body, path


# -- finding 9: the session -----------------------------------------------------------------


def login(client: Any, token: str = STRONG, **kwargs: Any) -> Any:
    data = {"token": token, "csrf_token": csrf_token(client, "/login"), "next": "/scheduled"}
    return client.post("/login", data=data, **kwargs)


def session_cookie(client: Any) -> Any:
    return client.get_cookie("session")


@pytest.mark.promise("security-web-cookie", "web-cookie-holds-no-token", "web-cookie-flags")
def test_the_session_cookie_never_holds_the_token(app) -> None:
    web = create_app(app, access=Access(token=STRONG))
    client = web.test_client()
    assert login(client).status_code == 302
    cookie = session_cookie(client)
    decoded = web.session_interface.get_signing_serializer(web).loads(cookie.value)  # type: ignore[attr-defined]
    assert STRONG not in str(decoded) and STRONG not in cookie.value
    assert cookie.http_only and cookie.same_site == "Lax"
    assert client.get("/scheduled").status_code == 200  # the digest logs in


@pytest.mark.promise("web-cookie-flags")
def test_over_https_the_cookie_is_secure(app) -> None:
    client = create_app(app, access=Access(token=STRONG)).test_client()
    # over HTTPS, Flask-WTF also wants a same-site Referer
    done = login(client, base_url="https://localhost", headers={"Referer": "https://localhost/"})
    assert done.status_code == 302
    assert session_cookie(client).secure
    plain = create_app(app, access=Access(token=STRONG)).test_client()
    login(plain)
    assert not session_cookie(plain).secure  # plain HTTP on loopback: it would be lost


@pytest.mark.promise("web-token-change-ends-sessions")
def test_a_changed_token_ends_the_sessions(app) -> None:
    web = create_app(app, access=Access(token=STRONG))
    client = web.test_client()
    login(client)
    web.extensions["celery_delayq"].access = Access(token=STRONG + "-rotated")
    assert client.get("/scheduled").status_code == 302  # back to the login page


@pytest.mark.promise("web-logout-needs-csrf")
def test_logout_is_a_post_with_its_csrf_token(app) -> None:
    client = create_app(app, access=Access(token=STRONG)).test_client()
    login(client)
    body = client.get("/scheduled").get_data(as_text=True)
    assert "Log out" in body
    assert client.post("/logout").status_code == 400  # a cross-site form cannot log out
    assert client.get("/scheduled").status_code == 200
    done = client.post("/logout", data={"csrf_token": csrf_token(client)})
    assert done.status_code == 302 and done.location == "/login"
    assert client.get("/scheduled").status_code == 302


@pytest.mark.promise("security-web-rate-limit", "web-login-rate-limit")
def test_failed_logins_are_rate_limited_per_address(app) -> None:
    client = create_app(app, access=Access(token=STRONG)).test_client()
    attacker = {"environ_base": {"REMOTE_ADDR": "192.0.2.7"}}
    for _ in range(10):
        assert login(client, "guess", **attacker).status_code == 401
    blocked = login(client, STRONG, **attacker)  # even the right token, for now
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) > 0
    bearer = {"Authorization": "Bearer guess"}
    assert client.get("/scheduled", headers=bearer, **attacker).status_code == 429
    other = create_app(app, access=Access(token=STRONG)).test_client()
    assert login(other, STRONG, environ_base={"REMOTE_ADDR": "192.0.2.8"}).status_code == 302


def test_the_rate_limit_forgets_and_its_memory_is_bounded() -> None:
    from celery_delayq.web.guard.throttle import FailedLogins

    now = [0.0]
    limit = FailedLogins(limit=3, window=60, addresses=100, clock=lambda: now[0])
    for _ in range(3):
        limit.failed("a")
    assert limit.retry_after("a") == 60
    now[0] = 61
    assert limit.retry_after("a") == 0
    for n in range(10_000):
        limit.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(limit) == 100


@pytest.mark.parametrize(
    "secret", ["t", "short-token", "aaaaaaaaaaaaaaaaaaaaaaaa", "abababab12121212"]
)
@pytest.mark.promise("web-strong-credentials-beyond-loopback")
def test_a_weak_secret_cannot_serve_beyond_loopback(secret: str) -> None:
    with pytest.raises(AddressRefused, match="weak delayq_web_token"):
        check_address("0.0.0.0", Access(token=secret))
    with pytest.raises(AddressRefused, match="weak delayq_web_password"):
        check_address("192.0.2.1", Access("ops", secret))
    check_address("127.0.0.1", Access(token=secret))  # loopback: anything goes
    check_address("0.0.0.0", Access(token=STRONG))


@pytest.mark.promise("security-web-auth-beyond-loopback", "web-strong-credentials-beyond-loopback")
def test_the_web_command_refuses_a_weak_token_beyond_loopback(make_app) -> None:
    result = invoke(make_app(delayq_web_token="t"), "web", "--address", "0.0.0.0", "--port", "1")
    assert result.exit_code != 0
    assert "weak delayq_web_token" in result.output and "16 characters" in result.output


# -- finding 10: no unpickling for display --------------------------------------------------


class Trap:
    """Unpickled, it creates a file: the side effect that shows a pickle ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


@pytest.fixture
def pickle_enabled() -> Iterator[None]:
    kombu.enable_insecure_serializers(["pickle"])
    try:
        yield
    finally:
        kombu.disable_insecure_serializers()


@pytest.mark.promise("security-web-never-unpickles", "web-bodies-never-unpickled")
def test_viewing_a_pickled_task_never_unpickles_it(app, client, tmp_path, pickle_enabled) -> None:
    """A message with a pickle body and no argsrepr (a client that sends its own): after
    kombu.enable_insecure_serializers(['pickle']) opening the pages ran the pickle."""
    trap = tmp_path / "unpickled"
    body = ((Trap(trap),), {}, {})
    assert pickle.dumps(body) and not trap.exists()
    eta = (datetime.now(timezone.utc) + timedelta(minutes=10)).isoformat()
    headers = {"task": "tests.noop", "id": "pickled-task-1", "eta": eta}
    with app.connection_for_write() as connection:
        connection.Producer().publish(
            body, routing_key="celery", serializer="pickle", headers=headers
        )
    with open_store(app) as store:
        assert [m.task_id for m in store.pending()] == ["pickled-task-1"]

    for path in ("/scheduled", "/task/pickled-task-1", "/scheduled?q=anything"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert not trap.exists(), f"{path} unpickled the message"
    body_text = client.get("/task/pickled-task-1").get_data(as_text=True)
    assert "not decoded for display: application/x-python-serialize" in body_text
    assert re.search(r"[0-9,]+ bytes: b&#39;\\x80", body_text)  # the pickle's first bytes


# -- finding 11 (web half), and every query parameter ---------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "after=" + "1" * 400,
        "before=" + "9" * 400 + "d",
        "after=9999-12-31T23:59:59&before=" + "1" * 30 + "d",
        "from=" + "9" * 400 + ".Y2VsZXJ5.AAAA",
        "from=1.%00.%00",
        "q=" + "x" * 5000,
        "refresh=" + "9" * 5000,
        "queue=" + "q" * 600,
    ],
)
@pytest.mark.promise("web-query-checked")
def test_a_hostile_query_is_a_clear_400_not_a_500(client, query: str) -> None:
    path = "/?" if query.startswith("refresh") else "/scheduled?"
    response = client.get(path + query)
    assert response.status_code in (200, 400), response.status_code
    if response.status_code == 400:
        assert "Something went wrong" not in response.get_data(as_text=True)


@pytest.mark.promise("web-query-checked")
def test_a_400_digit_due_after_says_what_is_wrong(client) -> None:
    response = client.get("/scheduled?after=" + "1" * 400)
    assert response.status_code == 400
    assert "further away than a date can be" in response.get_data(as_text=True)


@pytest.mark.promise("web-forms-limited")
def test_an_oversized_form_is_refused_and_changes_nothing(app, client) -> None:
    task_id = noop_task(app).apply_async((1,), countdown=600).id
    data = {
        "ids": [task_id],
        "confirmed": "yes",
        "csrf_token": csrf_token(client),
        "eta": "x" * (2 * 1024 * 1024),
    }
    response = client.post("/actions/reschedule", data=data)
    assert response.status_code == 413
    with open_store(app) as store:
        assert [m.task_id for m in store.pending()] == [task_id]


@pytest.mark.promise("security-web-csrf", "web-actions-need-csrf")
def test_a_cross_origin_post_without_a_valid_csrf_token_changes_nothing(app, client) -> None:
    task_id = noop_task(app).apply_async((1,), countdown=600).id
    periodic.upsert(app, "entry", "tests.noop", 3600)
    foreign = {"Origin": "https://evil.example", "Referer": "https://evil.example/x"}
    for token in (None, "forged", csrf_token(create_app(app, access=Access()).test_client())):
        for path, name in (("/actions/cancel", task_id), ("/periodic/pause", "entry")):
            data = {"ids": [name], "confirmed": "yes", "next": "/scheduled"}
            if token:
                data["csrf_token"] = token
            response = client.post(path, data=data, headers=foreign)
            assert response.status_code == 400, (path, token)
    with open_store(app) as store:
        assert [m.task_id for m in store.find(task_id)] == [task_id]
    assert periodic.get(app, "entry").entry.enabled  # type: ignore[union-attr]


# -- a fuzz of query strings: no 500, bounded Redis work ------------------------------------

FIELDS = ["from", "after", "before", "queue", "task", "q", "key", "range", "refresh", "x"]
VALUES = st.one_of(
    st.text(max_size=60),
    st.from_regex(r"-?[0-9]{1,400}(\.[0-9]{0,40})?[smhd]?", fullmatch=True),
    st.from_regex(r"-?[0-9]{1,20}\.[A-Za-z0-9_=-]{0,30}\.[A-Za-z0-9_=-]{0,30}", fullmatch=True),
    st.sampled_from(["15m", "2h", "1d", "2026-11-26T10:00", "celery", "tests.noop", "hour"]),
)


@pytest.mark.slow
@pytest.mark.promise("security-web-bounded-reads", "web-request-reads-bounded")
def test_fuzzed_query_strings_never_fail_and_read_a_bounded_amount(
    app, client, tie, redis_client, monkeypatch
) -> None:
    # a search reads at most SCAN_BUDGET messages, BATCH at a time: keep both small
    monkeypatch.setattr(views, "SCAN_BUDGET", 200)
    monkeypatch.setattr(views, "SCAN_SECONDS", None)
    monkeypatch.setattr(browse, "BATCH", 100)
    work = RedisWork(redis_client)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        path=st.sampled_from(["/", "/scheduled"]),
        args=st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=4),
    )
    def fuzz(path: str, args: dict[str, str]) -> None:
        response, sent, calls = work.during(
            lambda: client.get(path, query_string=args, headers={"Host": "localhost"})
        )
        assert response.status_code in (200, 400), (path, args, response.status_code)
        assert sent < 500_000 and calls < 60, (path, args, sent, calls)

    fuzz()


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.promise("web-request-reads-bounded")
def test_keyset_pages_walk_ties_across_queues_and_shards_once_in_order(
    make_app, shards: int
) -> None:
    """Ties in several queues (and shards of one): small pages walk every task once, in
    the store's total order (due, queue, message key), whatever page edge falls in a tie."""
    app = make_app(delayq_store_shards=shards)
    task = noop_task(app)
    due = datetime.now(timezone.utc) + timedelta(minutes=30)
    for queue in ("b", "a", "c"):
        calls = (((n,), {}, {"eta": due, "queue": queue}) for n in range(40))
        celery_delayq.schedule_many(task, calls)
    task.apply_async((0,), countdown=3600, queue="a")
    with open_store(app) as store:
        expected = store.pending(limit=1000)
        walked, after = [], None
        for _ in range(100):
            page = browse.browse(store, browse.TaskFilter(), after, size=7)
            walked += [t.message for t in page.tasks]
            if page.next is None:
                break
            after = browse.Cursor.decode(browse.Cursor.encode(page.next))
    order = [(m.due_ms, m.queue, m.key) for m in expected]
    assert order == sorted(order) and len(expected) == 121
    assert [(m.queue, m.key) for m in walked] == [(m.queue, m.key) for m in expected]
