"""Periodic entries that cannot run, against a real Redis (issue 34, findings 2, 7 and 8):
an entry whose message cannot be built is refused whole and writes nothing; records
written into the store by hand (nested too deep, bad options, a last run past the year
9999, a crontab that never fires) stop no other entry in a beat's pass, and every reader
names them instead of failing; a crontab that never fires is searched for once per
version. With real ``celery beat`` and ``worker`` processes:
tests/periodic/test_periodic_poison.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab, schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_delayq import periodic
from celery_delayq.beat import Scheduler
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic import occurrences as occurrences_module
from celery_delayq.periodic.entry import PeriodicEntry, from_ms
from celery_delayq.periodic.records import Mark
from celery_delayq.periodic.registry import EntryRegistry
from celery_delayq.periodic.writer import OccurrenceWriter

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import invoke

pytestmark = pytest.mark.adversarial

#: Every time zone's wall times of this crontab lie in a DST gap of Antarctica/Troll
#: (01:00-02:00 on the last Sunday of March, when it is the 31st): it never fires there.
NEVER = {
    "schedule": crontab(
        minute="*", hour="1", day_of_month="31", month_of_year="3", day_of_week="sun"
    ),
    "timezone": "Antarctica/Troll",
}
DEEP = 100_000  # past any parser's recursion limit
#: apply_async options whose message cannot be built, as found by the issue.
UNBUILDABLE = [
    {"countdown": "abc"},  # TypeError
    {"queue": 5},  # AttributeError
    {"expires": 1e300},  # OverflowError
    {"compression": "zz"},  # kombu's OperationalError
    {"serializer": "nope"},  # SerializerNotInstalled
    {"retry_policy": "x"},
    {"headers": 5},
    {"eta": "2030-01-01T00:00:00"},
    {"exchange": "everyone", "exchange_type": "fanout"},  # a broadcast is never delayed
]


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def good_entry(name: str = "good", **changes: Any) -> PeriodicEntry:
    values: dict[str, Any] = {
        "name": name,
        "task": TASK,
        "schedule": 2.0,
        "anchor": datetime.now(timezone.utc),
        "timezone": "UTC",
        **changes,
    }
    return PeriodicEntry(**values)


def stored(app: Celery, entry: PeriodicEntry) -> int:
    """``entry`` put in the store as it is, unchecked (as other code, or a hand, would);
    its version."""
    with open_store(app) as store:
        version, _ = EntryRegistry(store.client, store.keys).put(entry)
    return version


def stored_raw(app: Celery, name: str, text: str) -> None:
    """A record written into the store by hand."""
    with open_store(app) as store:
        store.client.hset(store.keys.periodic_entries, name, text)


def nested_args(name: str) -> str:
    """A record that is an entry but for its ``args``, nested ``DEEP`` lists deep."""
    data = json.loads(good_entry(name).to_json())
    data["args"] = []
    body = json.dumps(data).replace('"args": []', '"args": ' + "[" * DEEP + "]" * DEEP)
    return f"1 {body}"


def crontab_words(name: str) -> str:
    """A record that is an entry but for a crontab field cron cannot read."""
    fields = {"minute": "fizz", "hour": "*", "day_of_week": "*", "day_of_month": "*"}
    data = json.loads(good_entry(name).to_json())
    data["schedule"] = {"crontab": {**fields, "month_of_year": "*"}}
    return f"3 {json.dumps(data)}"


#: Each shape of bad record the issue found, by name, and how it is written into the
#: store: by hand, or as an entry unchecked.
SHAPES: dict[str, Any] = {
    "crontab-words": lambda app, name: stored_raw(app, name, crontab_words(name)),
    "deep": lambda app, name: stored_raw(app, name, "1 " + "[" * DEEP + "]" * DEEP),
    "deep-args": lambda app, name: stored_raw(app, name, nested_args(name)),
    "never": lambda app, name: stored(app, good_entry(name, **NEVER)),
    "not-json": lambda app, name: stored_raw(app, name, "7 {"),
    "unroutable": lambda app, name: stored(app, good_entry(name, options={"queue": 5})),
    "unserializable": lambda app, name: stored(
        app, good_entry(name, options={"serializer": "nope"})
    ),
}


def hand_written(app: Celery) -> list[str]:
    """Bad records of every shape the issue found, written beside each other; their
    names."""
    for name, write in SHAPES.items():
        write(app, name)
    return sorted(SHAPES)


def dashboard(app: Celery) -> Any:
    """The web dashboard of ``app``, through Flask's test client."""
    pytest.importorskip("flask")
    from celery_delayq.web import create_app
    from celery_delayq.web.guard.access import Access

    return create_app(app, access=Access()).test_client()


def mark_of(app: Celery, name: str) -> Mark | None:
    with open_store(app) as store:
        return Mark.parse(store.ahead_mark(app.conf.task_default_queue, name))


def periodic_keys(app: Celery) -> list[bytes]:
    with open_store(app) as store:
        return sorted(store.client.keys(store.keys.periodic_entries + "*"))


@pytest.mark.parametrize("options", UNBUILDABLE, ids=[str(o) for o in UNBUILDABLE])
@pytest.mark.promise("periodic-unsendable-entry-refused")
def test_an_entry_whose_message_cannot_be_built_is_refused_whole_and_writes_nothing(
    app, redis_client, options
) -> None:
    with pytest.raises(ValueError):
        periodic.upsert(app, "bad", TASK, 2.0, options=options)
    assert periodic_keys(app) == []
    assert periodic.entries(app) == []
    assert redis_client.llen(app.conf.task_default_queue) == 0
    with open_store(app) as store:
        assert store.pending(limit=10) == []


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("field", ["args", "kwargs", "options"])
@pytest.mark.promise("periodic-unsendable-entry-refused")
def test_arguments_nested_too_deep_to_encode_are_refused_with_a_value_error(app, field) -> None:
    # too deep for json on every Python (3.13's encoder takes 5,000 levels, 3.11's 900)
    deep = {"args": [nested(100_000)], "kwargs": {"a": nested(100_000)}}
    deep["options"] = {"headers": deep["kwargs"]}
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        periodic.upsert(app, "deep", TASK, 60.0, **{field: deep[field]})
    assert periodic_keys(app) == []


@pytest.mark.promise("periodic-unsendable-entry-refused")
def test_a_crontab_that_never_fires_in_its_time_zone_is_refused(app) -> None:
    with pytest.raises(ValueError, match="never fires in time zone Antarctica/Troll"):
        periodic.upsert(app, "never", TASK, **NEVER)
    assert periodic_keys(app) == []


@pytest.mark.promise("periodic-relative-under-a-second-refused")
def test_a_relative_interval_under_a_second_is_refused_and_writes_nothing(
    app, redis_client
) -> None:
    # Celery cuts each relative run to the second: from 10:00:00, 0.5 s later is 10:00:00
    with pytest.raises(ValueError, match="at least 1 second.*never move past the first"):
        periodic.upsert(app, "sub-second", TASK, schedule(timedelta(seconds=0.5), relative=True))
    assert periodic_keys(app) == []
    with open_store(app) as store:
        assert store.pending(limit=10) == []
    # not relative, half a second is an interval like any other
    periodic.upsert(app, "sub-second", TASK, schedule(timedelta(seconds=0.5)))
    assert [info.entry.name for info in periodic.entries(app)] == ["sub-second"]


OPTION_NAMES = [
    "queue",
    "exchange",
    "exchange_type",
    "routing_key",
    "priority",
    "serializer",
    "compression",
    "headers",
    "expires",
    "retry",
    "retry_policy",
    "time_limit",
    "soft_time_limit",
    "shadow",
    "link",
    "delivery_mode",
    "ignore_result",
    "producer",
    "declare",
    "countdown",
    "eta",
    "content_type",
    "argsrepr",
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["json", "pickle", "zlib", "default", "", "celery", "fanout"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
OPTIONS = st.dictionaries(
    st.sampled_from(OPTION_NAMES) | st.text(max_size=8), JSON_VALUES, max_size=3
)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples every run
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(options=OPTIONS)
@pytest.mark.promise("periodic-unsendable-entry-refused")
def test_any_options_are_refused_with_a_value_error_and_nothing_written_or_stored_and_sent(
    app, options
) -> None:
    """The one error, and nothing written; or the entry stored, its occurrences written
    ahead, and a beat's later pass over it failing nothing."""
    try:
        periodic.upsert(app, "swept", TASK, 3600.0, options=options)
    except ValueError:
        assert periodic.get(app, "swept") is None
        with open_store(app) as store:
            assert store.pending(limit=10) == []
        return
    try:
        info = periodic.get(app, "swept")
        assert info is not None
        with open_store(app) as store:
            assert len(store.pending(limit=10)) >= 1
            found = EntryRegistry(store.client, store.keys).all()
        writer = OccurrenceWriter(app)
        writer.advance_all(found, datetime.now(timezone.utc) + timedelta(hours=2))
        assert not writer.failures
    finally:
        periodic.remove(app, "swept")
        with open_store(app) as store:  # occurrences due within the settle window stay
            store.client.flushall()


@pytest.fixture
def beat(app) -> Iterator[Scheduler]:
    scheduler = Scheduler(app)
    yield scheduler
    scheduler.close()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.promise("periodic-bad-entry-stops-no-other")
def test_a_beat_pass_writes_the_good_entry_ahead_beside_a_bad_stored_one(app, beat, shape) -> None:
    SHAPES[shape](app, shape)
    version = stored(app, good_entry("zz-good"))  # read after the bad one
    now = datetime.now(timezone.utc)
    for passes in range(3):
        moment = now + timedelta(minutes=10 * passes)
        beat._pass(moment)
        mark = mark_of(app, "zz-good")
        assert mark is not None and mark.version == version and mark.up_to_ms is not None
        assert from_ms(mark.up_to_ms) > moment + beat.writer.horizon - timedelta(seconds=2)


@pytest.mark.promise("periodic-bad-entry-stops-no-other")
def test_a_beat_pass_writes_the_good_entry_ahead_beside_every_bad_stored_one(
    app, beat, caplog
) -> None:
    bad = hand_written(app)
    version = stored(app, good_entry())
    now = datetime.now(timezone.utc)
    for passes in range(3):
        moment = now + timedelta(minutes=10 * passes)
        with caplog.at_level(logging.WARNING):
            beat._pass(moment)
        mark = mark_of(app, "good")
        assert mark is not None and mark.version == version
        assert mark.up_to_ms is not None
        # written up to the last occurrence (every 2 s) within the horizon
        assert from_ms(mark.up_to_ms) > moment + beat.writer.horizon - timedelta(seconds=2)
    for name in ["unroutable", "unserializable"]:
        failed = [
            r for r in caplog.records if r.getMessage().startswith(f"periodic entry {name!r} (")
        ]
        assert len(failed) == 3  # each pass, with the traceback the first time
        assert [r.exc_info is not None for r in failed] == [True, False, False]
        assert mark_of(app, name) is None
    for name in ["deep", "deep-args", "not-json", "crontab-words"]:
        assert f"periodic entry {name!r} cannot be read" in caplog.text
    assert "never" in bad and mark_of(app, "never") is not None  # marked: nothing to write


@pytest.mark.promise("periodic-unreadable-named")
def test_every_reader_names_the_unreadable_records_and_lists_the_rest(app) -> None:
    bad = hand_written(app)
    periodic.upsert(app, "good", TASK, 3600.0)  # nothing falls due
    unreadable = {"crontab-words", "deep", "deep-args", "not-json"}
    readable = sorted(["good", *(set(bad) - unreadable)])

    listed = invoke(app, "periodic", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [each["name"] for each in json.loads(listed.stdout)] == readable
    for name in unreadable:
        assert f"periodic entry {name!r} cannot be read" in listed.stderr
    assert invoke(app, "periodic", "list").exit_code == 0

    shown = invoke(app, "periodic", "show", "deep")
    assert shown.exit_code == 1
    assert "periodic entry 'deep' cannot be read" in shown.output

    status = invoke(app, "status", "--json")
    assert status.exit_code == 0, status.output
    reported = json.loads(status.stdout)["periodic"]["unreadable"]
    assert {each["name"] for each in reported} == unreadable
    human = invoke(app, "status")
    assert human.exit_code == 0, human.output
    assert "periodic entry 'deep' cannot be read" in human.stdout

    assert [info.entry.name for info in periodic.entries(app)] == readable
    found = periodic.listing(app)
    assert [info.entry.name for info in found.entries] == readable
    assert {each.name for each in found.unreadable} == unreadable


@pytest.mark.promise("periodic-unreadable-named")
def test_a_last_run_past_the_year_9999_reads_as_no_run_in_every_reader(app) -> None:
    periodic.upsert(app, "good", TASK, 3600.0)  # nothing falls due
    with open_store(app) as store:
        store.client.hset(store.keys.periodic_runs, "good", "999999999999999 1")
    good = periodic.get(app, "good")
    assert good is not None and good.history.last_occurrence is None
    listed = invoke(app, "periodic", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)[0]["last_run"] is None
    assert invoke(app, "periodic", "show", "good").exit_code == 0
    assert invoke(app, "status").exit_code == 0
    page = dashboard(app).get("/periodic")
    assert page.status_code == 200
    assert "none recorded" in page.get_data(as_text=True)


@pytest.mark.promise("periodic-unreadable-named")
def test_the_dashboard_lists_the_good_entries_and_names_the_unreadable_ones(app) -> None:
    hand_written(app)
    periodic.upsert(app, "good", TASK, 3600.0)  # nothing falls due
    response = dashboard(app).get("/periodic")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert "<code>good</code>" in page
    assert "4 stored entries cannot be read" in page
    assert "<code>deep</code>: ValueError: not a periodic entry: RecursionError" in page


@pytest.mark.promise("periodic-ended-found-once")
def test_a_crontab_that_never_fires_is_searched_once_per_version_however_many_passes(
    app, beat, monkeypatch
) -> None:
    searches = []
    search = occurrences_module.next_occurrence

    def counted(fields: Any, zone: Any, after: datetime) -> datetime | None:
        found = search(fields, zone, after)
        if found is None:
            searches.append(after)
        return found

    monkeypatch.setattr(occurrences_module, "next_occurrence", counted)
    stored(app, good_entry("never", **NEVER))
    stored(app, good_entry())
    now = datetime.now(timezone.utc)
    for passes in range(5):
        beat._pass(now + timedelta(seconds=5 * passes))
    assert len(searches) == 1
    mark = mark_of(app, "good")
    assert mark is not None and mark.up_to_ms is not None  # written beside it
    stored(app, good_entry("never", **NEVER))  # a new version: searched again, once
    for passes in range(5, 10):
        beat._pass(now + timedelta(seconds=5 * passes))
    assert len(searches) == 2


@pytest.mark.promise("periodic-unsendable-entry-paused")
def test_an_entry_that_cannot_be_sent_can_be_paused_but_not_resumed_or_run(app, beat) -> None:
    stored(app, good_entry("unroutable", options={"queue": 5}))
    periodic.pause(app, "unroutable")
    beat._pass(datetime.now(timezone.utc))
    assert not beat.writer.failures  # paused, it has nothing to write
    with pytest.raises(ValueError, match="'unroutable' refused"):
        periodic.resume(app, "unroutable")
    with pytest.raises(ValueError, match="'unroutable' refused"):
        periodic.run_now(app, "unroutable")
    found = periodic.get(app, "unroutable")
    assert found is not None and not found.entry.enabled
    assert periodic.remove(app, "unroutable")


@pytest.mark.promise("periodic-bad-entry-stops-no-other")
def test_a_beat_schedule_entry_that_cannot_be_sent_is_left_out_and_the_others_written(
    app, caplog
) -> None:
    from celery_delayq.periodic.manage import sync_settings

    schedule = {
        "bad": {"task": TASK, "schedule": 2.0, "options": {"serializer": "nope"}},
        "good": {"task": TASK, "schedule": 2.0},
    }
    with caplog.at_level(logging.ERROR):
        synced = sync_settings(app, schedule, datetime.now(timezone.utc))
    assert (synced.written, synced.refused) == (["good"], ["bad"])
    assert "beat_schedule['bad'] is not written" in caplog.text
    assert [info.entry.name for info in periodic.entries(app)] == ["good"]


@pytest.mark.promise("periodic-expires-from-occurrence")
def test_an_expires_in_seconds_counts_from_each_occurrence_not_from_its_write_ahead(app) -> None:
    """Celery counts a numeric ``expires`` from the send; an occurrence is sent when it is
    written ahead, minutes before it is due, and would expire unrun."""
    periodic.upsert(app, "expiring", TASK, 60.0, options={"expires": 30})
    with open_store(app) as store:
        written = [json.loads(m.record.payload)["headers"] for m in store.pending(limit=10)]
    assert len(written) >= 4  # the default horizon: 300 s
    for headers in written:
        eta, expires = (datetime.fromisoformat(headers[key]) for key in ("eta", "expires"))
        assert expires - eta == timedelta(seconds=30)
