"""Periodic occurrences written ahead by beats (periodic/writer.py) through a real app's
celery-delayq channel into a real Redis, at injected times: once each across racing
beats, withdrawn on a change or a pause, never of an older version than a change wrote
(beats interleaved with the change by force), and missed ones caught up by each policy."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.store.ahead import GONE_KEPT_MS
from celery_delayq.periodic import writer as writer_module
from celery_delayq.periodic.entry import PeriodicEntry
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.periodic.records import ENTRY_HEADER, OCCURRENCE_HEADER, Mark
from celery_delayq.periodic.registry import EntryRegistry, Versioned
from celery_delayq.periodic.schedules.clocked import clocked
from celery_delayq.periodic.schedules.rrules import rrule_schedule
from celery_delayq.periodic.writer import MOST_AHEAD, MOST_READ_AGE, OccurrenceWriter

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import pending_runs

pytestmark = pytest.mark.integration

#: Every injected "now" lies a day ahead of the wall clock, so each message is ahead of
#: it too and kept in the store (a message already due would be published at once).
NOW = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
HORIZON = timedelta(seconds=10)


def entry(every: float = 1.0, **changes: Any) -> PeriodicEntry:
    values: dict[str, Any] = {
        "name": "heartbeat",
        "task": "tests.remember",
        "schedule": every,
        "anchor": NOW - timedelta(hours=1),
        "timezone": "UTC",
        "args": ("tick",),
        **changes,
    }
    return PeriodicEntry(**values)


def written(app) -> list[tuple[datetime, datetime, dict[str, Any]]]:
    """(occurrence, due, headers) of every message in the store, in due order."""
    with open_store(app) as store:
        found = []
        for message in store.pending(queue="default", limit=10_000):
            headers = json.loads(message.record.payload)["headers"]
            occurrence = datetime.fromisoformat(headers[OCCURRENCE_HEADER])
            found.append((occurrence, datetime.fromtimestamp(message.due, timezone.utc), headers))
        return sorted(found, key=lambda each: each[1])


def occurrence_times(app) -> list[datetime]:
    return [each[0] for each in written(app)]


def seconds(*values: float) -> list[datetime]:
    return [NOW + timedelta(seconds=value) for value in values]


def test_the_occurrences_up_to_the_horizon_are_written_once(make_app) -> None:
    app = make_app()
    writer = OccurrenceWriter(app, HORIZON, settle=timedelta(0))
    first = writer.advance(entry(), 1, NOW)
    assert (first.stored, first.late, first.missed) == (10, 0, 0)
    assert occurrence_times(app) == seconds(*range(1, 11))
    occurrence, due, headers = written(app)[0]
    assert due == occurrence and headers[ENTRY_HEADER] == "heartbeat"

    assert writer.advance(entry(), 1, NOW).stored == 0  # up to date: nothing to write
    later = writer.advance(entry(), 1, NOW + timedelta(seconds=5))
    assert later.stored == 5
    assert occurrence_times(app) == seconds(*range(1, 16))


def test_racing_beats_write_each_occurrence_once(make_app) -> None:
    """Three beats, each its own app and connection, advance at the same instants."""
    apps = [make_app() for _ in range(3)]
    results: list[int] = []

    def beat(app) -> None:
        writer = OccurrenceWriter(app, HORIZON, settle=timedelta(0))
        for step in range(20):
            results.append(writer.advance(entry(), 1, NOW + timedelta(seconds=step)).stored)

    threads = [threading.Thread(target=beat, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert occurrence_times(apps[0]) == seconds(*range(1, 30))
    assert sum(results) == 29


def test_a_slow_pass_stores_the_occurrences_that_fell_due_and_publishes_none(
    make_app, redis_client
) -> None:
    """A pass whose ``now`` lies 20 s back (a long pass on a loaded machine): the
    occurrences already due are stored under the mark with the rest, for the movers to
    send at once; none is published by the build, outside the mark, where another beat
    that writes the same occurrences would run it a second time."""
    app = make_app()
    slow_now = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=20)
    writer = OccurrenceWriter(app, timedelta(seconds=30), settle=timedelta(0))
    outcome = writer.advance(entry(anchor=slow_now - timedelta(hours=1)), 1, slow_now)
    assert outcome.stored == 30
    assert occurrence_times(app) == [slow_now + timedelta(seconds=n) for n in range(1, 31)]
    assert redis_client.llen("default") == 0  # nothing reached the queue past the store


def test_an_upsert_takes_effect_from_the_next_occurrence(make_app) -> None:
    app = make_app()
    writer = OccurrenceWriter(app, HORIZON, settle=timedelta(0))
    writer.advance(entry(every=1), 1, NOW)
    changed = writer.advance(entry(every=4, anchor=NOW), 2, NOW + timedelta(seconds=2))
    assert (changed.withdrawn, changed.stored) == (8, 3)  # 3 to 10 withdrawn; 4, 8, 12 written
    assert occurrence_times(app) == seconds(1, 2, 4, 8, 12)


def test_pause_withdraws_and_resume_writes_from_now(make_app) -> None:
    app = make_app()
    writer = OccurrenceWriter(app, HORIZON, settle=timedelta(0))
    writer.advance(entry(), 1, NOW)
    assert writer.advance(entry(enabled=False), 2, NOW).withdrawn == 10
    assert occurrence_times(app) == []
    assert writer.advance(entry(enabled=False), 2, NOW + timedelta(minutes=1)).stored == 0
    resumed = writer.advance(entry(), 3, NOW + timedelta(minutes=2))
    assert resumed.stored == 10 and resumed.late == 0  # a pause's occurrences never run
    assert occurrence_times(app)[0] == NOW + timedelta(minutes=2, seconds=1)


@pytest.mark.parametrize(
    "policy, late, missed",
    [("latest", [59], 58), ("all", list(range(1, 60)), 0), ("none", [], 59)],
)
def test_missed_occurrences_follow_the_entrys_catch_up(make_app, policy, late, missed) -> None:
    """Every beat was down for an hour: 59 one-minute occurrences went unwritten."""
    app = make_app()
    writer = OccurrenceWriter(app, timedelta(seconds=30), catch_up_bound=100, settle=timedelta(0))
    minutely = entry(every=60, anchor=NOW, catch_up=policy)
    writer.advance(minutely, 1, NOW)  # writes the one at +1 min (the next one)
    back = NOW + timedelta(minutes=60, seconds=30)
    outcome = writer.advance(minutely, 1, back)
    assert (outcome.late, outcome.missed) == (len(late), missed)
    runs = written(app)
    caught_up = sorted(occurrence for occurrence, due, _ in runs if due != occurrence)
    assert caught_up == [NOW + timedelta(minutes=1 + n) for n in late]
    assert all(
        due == back + timedelta(seconds=1) for occurrence, due, _ in runs if due != occurrence
    )
    assert runs[-1][0] == NOW + timedelta(minutes=61)  # then on as before
    with open_store(app) as store:  # counted, for status, the metrics and the dashboard
        history = EntryHistory(store.client, store.keys).read([minutely.name])
    assert (history[minutely.name].late, history[minutely.name].missed) == (len(late), missed)


def test_a_long_outage_of_a_fast_entry_is_walked_in_bounded_time(make_app) -> None:
    app = make_app()
    writer = OccurrenceWriter(app, HORIZON, catch_up_bound=5, settle=timedelta(0))
    fast = entry(every=0.1, anchor=NOW, catch_up="all")
    writer.advance(fast, 1, NOW)
    outcome = writer.advance(fast, 1, NOW + timedelta(days=2))
    assert outcome.late == 5 and outcome.missed > 1_000_000
    assert writer.advance(fast, 1, NOW + timedelta(days=2)).stored == 0
    assert len(occurrence_times(app)) <= 100 + 5 + MOST_AHEAD


@pytest.mark.parametrize(
    "text, mark",
    [
        ("3 1700000000000", Mark(3, 1_700_000_000_000)),
        ("3 paused", Mark(3, None)),
        (None, None),
        ("", None),
        ("3", None),
        ("x 1", None),
        ("-1 5", None),
        ("3 1e400", None),
        ("\u00b2 5", None),  # a digit to str.isdigit, not to int()
        ("3 \u00b2", None),
        ("9" * 40 + " 1", None),
        ("3 " + "9" * 40, None),
        ("3 paused ", None),
    ],
)
def test_a_mark_this_code_did_not_write_reads_as_none(text, mark) -> None:
    """None makes the next advance write the entry anew (and withdraw the old)."""
    assert Mark.parse(text) == mark
    if mark is not None:
        assert Mark.parse(mark.text()) == mark


def test_a_change_leaves_what_a_mover_may_have_moved_and_writes_each_time_once(
    make_app,
) -> None:
    """Occurrences due within ``settle`` of a change may be in a queue already (moved
    ahead of their time): they stay, and the new version starts after them."""
    app = make_app()
    writer = OccurrenceWriter(app, HORIZON, settle=timedelta(seconds=3))
    writer.advance(entry(), 1, NOW)
    changed = writer.advance(entry(), 2, NOW + timedelta(seconds=2))  # a new version
    assert changed.withdrawn == 5  # +6 to +10; +3 to +5 stay
    assert occurrence_times(app) == seconds(*range(1, 13))


def test_a_pass_over_many_entries_writes_only_those_that_need_it(make_app, redis_client) -> None:
    """``advance_all`` (a beat's pass) reads every mark in one pipeline and advances only
    the entries not yet written up to the horizon: new, changed, paused, or falling
    behind; a bad entry stops no other."""
    app = make_app()
    writer = OccurrenceWriter(app, HORIZON, settle=timedelta(0))
    every = [Versioned(entry(name=f"e{n}", every=4, anchor=NOW), 1) for n in range(50)]
    first = writer.advance_all(every, NOW)
    assert sorted(first) == sorted(e.entry.name for e in every)
    assert {done.stored for done in first.values()} == {2}  # 4 and 8 s: up to 10 s
    # 11 s: the next one (12 s) is written, though beyond it, as a pass may come late
    beyond = writer.advance_all(every, NOW + timedelta(seconds=1))
    assert {done.stored for done in beyond.values()} == {1}

    def calls(command: str) -> int:
        stats = redis_client.info("commandstats")
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    before = {command: calls(command) for command in ("hmget", "hget", "evalsha")}
    again = writer.advance_all(every, NOW + timedelta(seconds=1))
    assert again == {}  # each written to 12 s, beyond the horizon (11 s): nothing to do
    after = {command: calls(command) for command in before}
    # the 50 marks in one HMGET (one queue), no mark read one by one, no script run
    assert {c: after[c] - before[c] for c in before} == {"hmget": 1, "hget": 0, "evalsha": 0}

    paused = Versioned(entry(name="e0", every=4, anchor=NOW, enabled=False), 2)
    behind = writer.advance_all([paused, *every[1:]], NOW + timedelta(seconds=3))
    assert sorted(behind) == sorted(e.entry.name for e in every)  # 13 s: each wants 16 s
    assert behind["e0"].withdrawn == 3


def read_registry(app) -> list[Versioned]:
    """A beat's read of the registry, at the start of its pass."""
    with open_store(app) as store:
        return EntryRegistry(store.client, store.keys).all()


def upsert_v2(app, at: datetime) -> None:
    periodic.upsert(app, "heartbeat", TASK, 1.0, args=("v2",), now=at)


def pause(app, at: datetime) -> None:
    periodic.pause(app, "heartbeat", now=at)


def remove(app, at: datetime) -> None:
    periodic.remove(app, "heartbeat", now=at)


@pytest.mark.parametrize("change", [upsert_v2, pause, remove], ids=lambda f: f.__name__)
@pytest.mark.promise("periodic-versions-forward")
def test_a_beat_that_read_an_entry_before_a_change_writes_none_of_the_old_version(
    periodic_app, change
) -> None:
    """Beat A reads the registry (version 1), a change is made and written, then A's pass
    writes: nothing of version 1 is written after the change's settle window, and what
    the change wrote stays (the old code wrote version 1 back until A's next pass)."""
    app = periodic_app
    periodic.upsert(app, "heartbeat", TASK, 1.0, args=("v1",), now=NOW)
    held = read_registry(app)
    changed_at = NOW + timedelta(seconds=2)
    change(app, changed_at)
    before = pending_runs(app)
    beat = OccurrenceWriter(app, HORIZON)
    settled = changed_at + beat.settle

    passed = beat.advance_all(held, changed_at + timedelta(seconds=1))
    assert pending_runs(app) == before
    assert [arg for when, arg in before if when > settled and arg != "v2"] == []
    assert passed == {}  # its read of the marks finds a newer version: nothing to do
    advanced = beat.advance(held[0].entry, held[0].version, changed_at + timedelta(seconds=1))
    assert (advanced.stale, advanced.stored, advanced.withdrawn) == (True, 0, 0)
    assert pending_runs(app) == before


@pytest.mark.promise("periodic-versions-forward")
def test_the_store_refuses_an_old_version_that_a_beat_planned_before_a_change(
    periodic_app, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change lands between a beat's read of the mark and its write: the store's
    compare-and-set finds the newer version and refuses, in the same atomic call."""
    app = periodic_app
    periodic.upsert(app, "heartbeat", TASK, 1.0, args=("v1",), now=NOW)  # 300 s ahead
    held = read_registry(app)[0]
    pass_at = NOW + timedelta(seconds=295)  # version 1 needs writing on to 305 s
    changed_at = pass_at + timedelta(milliseconds=500)
    beat = OccurrenceWriter(app, HORIZON)
    messages = writer_module.occurrence_messages
    interleaved: list[bool] = []

    def built_while_an_upsert_lands(*args: Any) -> Any:
        if not interleaved:
            interleaved.append(True)
            upsert_v2(app, changed_at)
        return messages(*args)

    monkeypatch.setattr(writer_module, "occurrence_messages", built_while_an_upsert_lands)
    advanced = beat.advance(held.entry, held.version, pass_at)
    settled = changed_at + beat.settle
    assert {arg for when, arg in pending_runs(app) if when > settled} == {"v2"}
    assert interleaved and advanced.stale and advanced.stored == 0


def test_a_writer_that_read_an_entry_too_long_ago_leaves_it_to_the_next_read(
    periodic_app,
) -> None:
    """A removal's tombstone is kept far longer than a writer may hold what it read."""
    assert MOST_READ_AGE * 1000 * 10 <= GONE_KEPT_MS
    beat = OccurrenceWriter(periodic_app, HORIZON)
    long_ago = time.monotonic() - MOST_READ_AGE - 1
    advanced = beat.advance(entry(), 1, NOW, read_at=long_ago)
    assert (advanced.stale, advanced.stored) == (True, 0)
    assert beat.advance_all([Versioned(entry(), 1)], NOW, read_at=long_ago) == {
        "heartbeat": advanced
    }
    assert pending_runs(periodic_app) == []


# --- the entry model: one-off, start and end, rules ---------------------------------------


@pytest.mark.promise("periodic-one-off-once")
@pytest.mark.parametrize(
    "changes",
    [
        {"schedule": clocked(NOW + timedelta(seconds=3))},
        {"schedule": 3.0, "anchor": NOW, "one_off": True},
        {"schedule": crontab(), "anchor": NOW, "one_off": True},  # the next whole minute
    ],
    ids=["clocked", "one_off interval", "one_off crontab"],
)
def test_a_one_off_entry_is_written_once_then_has_ended(make_app, changes) -> None:
    """Its one occurrence is written; beats passing later, or racing, write nothing more,
    and find it ended once."""
    app = make_app()
    one = entry(**changes)
    only = one.occurrences().after(NOW)
    assert only is not None and only > NOW
    writers = [OccurrenceWriter(app, HORIZON, settle=timedelta(0)) for _ in range(2)]
    first = [writer.advance(one, 1, NOW) for writer in writers]
    assert sorted(done.stored for done in first) == [0, 1]
    for step in (1, 5, 60, 3600):
        later = [w.advance_all([Versioned(one, 1)], NOW + timedelta(seconds=step)) for w in writers]
        assert all(done.stored == 0 and done.late == 0 for each in later for done in each.values())
    assert occurrence_times(app) == [only]
    assert all(w.advance(one, 1, NOW + timedelta(hours=2)).ended for w in writers)


@pytest.mark.promise("periodic-start-and-expires")
def test_no_occurrence_is_written_before_the_start_time_nor_after_expires(make_app) -> None:
    app = make_app()
    writer = OccurrenceWriter(app, timedelta(seconds=30), settle=timedelta(0))
    bounded = entry(start_time=NOW + timedelta(seconds=5), expires=NOW + timedelta(seconds=40))
    assert writer.advance(bounded, 1, NOW).stored == 26  # 5 to 30 s: from the start time
    ended = writer.advance(bounded, 1, NOW + timedelta(seconds=30))
    assert (ended.stored, ended.ended) == (10, False)  # 31 to 40 s
    last = writer.advance(bounded, 1, NOW + timedelta(seconds=45))
    assert (last.stored, last.late, last.ended) == (0, 0, True)
    assert occurrence_times(app) == seconds(*range(5, 41))


@pytest.mark.promise("periodic-start-and-expires")
def test_an_upsert_of_an_entry_that_has_ended_is_refused(make_app) -> None:
    writer = OccurrenceWriter(make_app(), HORIZON, settle=timedelta(0))
    with pytest.raises(ValueError, match="or has ended"):
        writer.check(entry(expires=NOW - timedelta(seconds=1)), NOW)
    with pytest.raises(ValueError, match="or has ended"):
        writer.check(entry(schedule=clocked(NOW - timedelta(seconds=1))), NOW)


@pytest.mark.promise("periodic-rrule")
def test_a_counted_rule_writes_its_times_then_has_ended(make_app) -> None:
    app = make_app()
    writer = OccurrenceWriter(app, timedelta(seconds=30), settle=timedelta(0))
    start = NOW.astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None) + timedelta(seconds=2)
    rule = entry(
        schedule=rrule_schedule("FREQ=SECONDLY;INTERVAL=5;COUNT=3", start), timezone="Europe/Berlin"
    )
    assert writer.advance(rule, 1, NOW).stored == 3
    assert occurrence_times(app) == seconds(2, 7, 12)
    assert writer.advance(rule, 1, NOW + timedelta(minutes=5)).ended


@pytest.mark.promise("periodic-rrule-dst")
def test_a_rules_wall_time_in_a_dst_gap_is_written_at_the_gaps_end(make_app) -> None:
    """02:30 every day in Berlin: on the last Sunday of March the clocks jump from 02:00
    to 03:00 CEST (01:00 UTC), and that day's occurrence is at 03:00 CEST, once. (Next
    year's: the messages must lie ahead of the wall clock to be kept in the store.)"""
    year = NOW.year + 1
    gap = max(day for day in range(25, 32) if datetime(year, 3, day).weekday() == 6)
    app = make_app()
    writer = OccurrenceWriter(app, timedelta(days=3), settle=timedelta(0))
    daily = entry(
        schedule="FREQ=DAILY;BYHOUR=2;BYMINUTE=30;BYSECOND=0",
        anchor=NOW,
        timezone="Europe/Berlin",
    )
    assert writer.advance(daily, 1, datetime(year, 3, gap - 2, 12, tzinfo=timezone.utc)).stored == 3
    assert occurrence_times(app) == [
        datetime(year, 3, gap - 1, 1, 30, tzinfo=timezone.utc),  # 02:30 CET
        datetime(year, 3, gap, 1, 0, tzinfo=timezone.utc),  # 03:00 CEST: the gap's end
        datetime(year, 3, gap + 1, 0, 30, tzinfo=timezone.utc),  # 02:30 CEST
    ]
