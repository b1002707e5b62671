"""Periodic entries in the store with real ``celery beat`` processes and a real worker
(celery_delayq.beat:Scheduler): any number of beats, each occurrence run once."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import schedules

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.records import Mark
from celery_delayq.periodic.writer import OccurrenceWriter
from celery_delayq.testing import wait_until

from ..helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(120)]

TICK = "tests.worker_app.tick"
SETTINGS = {"beat_schedule": {"tick": {"task": TICK, "schedule": 1.0}}}


def occurrences(redis_client, entry: str = "tick") -> Counter[datetime]:
    """How many times each occurrence of ``entry`` ran."""
    return Counter(
        datetime.fromisoformat(run["occurrence"])
        for run in runs(redis_client)
        if run.get("entry") == entry
    )


def beat(redis_url: str, settings: dict[str, Any] = SETTINGS, **options: Any):
    return celery_process(
        "beat", redis_url, settings, "-S", "delayq", "--pidfile=", ready="beat: Starting", **options
    )


def worker(redis_url: str, settings: dict[str, Any] = SETTINGS, **options: Any):
    return celery_process("worker", redis_url, settings, "-P", "solo", **options)


def assert_each_ran_once_without_gaps(seen: Counter[datetime], every: timedelta) -> None:
    """Every occurrence from the first seen to the last ran, and none twice."""
    first, last = min(seen), max(seen)
    expected = [first + every * n for n in range(round((last - first) / every) + 1)]
    assert sorted(seen) == expected
    assert [when for when, count in seen.items() if count > 1] == []


def test_three_beats_at_once_run_each_occurrence_of_a_one_second_entry_once(
    make_app, redis_server, redis_client
) -> None:
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url))
        for _ in range(3):
            stack.enter_context(beat(redis_server.url))
        wait_until(lambda: len(occurrences(redis_client)) >= 10, timeout=60)
    seen = occurrences(redis_client)
    assert_each_ran_once_without_gaps(seen, timedelta(seconds=1))
    # the worker recorded each run as it started: the last one is the entry's last run
    found = periodic.get(make_app(), "tick")
    assert found is not None
    assert found.history.last_occurrence in seen
    assert found.history.last_occurrence == max(seen)


def test_an_upsert_pause_and_resume_while_beats_run_take_effect_from_the_next_occurrence(
    make_app, redis_server, redis_client
) -> None:
    app = make_app()
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url))
        wait_until(lambda: len(occurrences(redis_client)) >= 3, timeout=60)
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
            changed = periodic.upsert(app, "api-tick", "tests.worker_app.tick", 2.0)
        assert not changed.replaced
        periodic.pause(app, "tick")  # the settings' entry, paused at run time
        # after the call: its own now, from which it withdraws, is no later than this
        paused_at = datetime.now(timezone.utc)
        settle = timedelta(seconds=7)  # what may already be in a queue goes on (writer.py)
        wait_until(
            lambda: (
                len([w for w in occurrences(redis_client, "api-tick") if w > paused_at + settle])
                >= 3
            ),
            timeout=60,
        )
        # before the call: it runs the entry again from its own now, which a loaded
        # machine can put well after any stamp taken before it, never before
        resumed_at = datetime.now(timezone.utc)
        periodic.resume(app, "tick")
        wait_until(
            lambda: len([w for w in occurrences(redis_client) if w > resumed_at]) >= 3,
            timeout=60,
        )
    ticks, api_ticks = occurrences(redis_client), occurrences(redis_client, "api-tick")
    assert [when for when, count in ticks.items() if count > 1] == []
    assert [when for when, count in api_ticks.items() if count > 1] == []
    # paused: nothing after the settle window until the resume; then every second again
    assert [when for when in ticks if paused_at + settle < when <= resumed_at] == []
    again = sorted(when for when in ticks if when > resumed_at)
    assert again[0] - resumed_at <= timedelta(seconds=settle.seconds + 1)
    assert all(later - earlier == timedelta(seconds=1) for earlier, later in zip(again, again[1:]))
    spaced = sorted(api_ticks)
    assert all(
        later - earlier == timedelta(seconds=2) for earlier, later in zip(spaced, spaced[1:])
    )


@pytest.mark.timeout(180)  # a loaded machine takes a while over 28,800 messages
def test_a_beat_killed_while_it_writes_ahead_leaves_each_occurrence_written_once(
    make_app, redis_server, redis_client
) -> None:
    """One beat is SIGKILLed as it writes ahead (its first entries written, the rest not);
    another takes over: no occurrence is lost or doubled."""
    names = [f"e{n:02}" for n in range(ENTRIES)]
    settings = {
        # an hour of 5-second occurrences per entry: each entry's write is long
        "delayq_periodic_horizon": 3600,
        "beat_schedule": {name: {"task": TICK, "schedule": 5.0} for name in names},
    }
    app = make_app()
    with open_store(app) as store:
        marks = store.keys.for_queue(app.conf.task_default_queue).periodic_marks
    with beat(redis_server.url, settings) as first:
        wait_until(lambda: redis_client.hlen(marks) > 0, interval=0.0005, timeout=60)
        first.kill()
        written_before = redis_client.hlen(marks)
    assert 0 < written_before < ENTRIES  # killed in the middle of its writes
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, settings))
        stack.enter_context(beat(redis_server.url, settings))
        # the pass is done (every entry has its mark: the names and Celery's cleanup
        # entry), and each entry ran twice or more
        wait_until(
            lambda: (
                redis_client.hlen(marks) == ENTRIES + 1
                and all(len(occurrences(redis_client, name)) >= 2 for name in names)
            ),
            timeout=90,
        )
    for name in names:
        assert_each_ran_once_without_gaps(occurrences(redis_client, name), timedelta(seconds=5))
    pending = Counter(
        (headers["delayq-periodic"], headers["delayq-occurrence"])
        for headers in pending_headers(app)
    )
    assert [key for key, count in pending.items() if count > 1] == []
    # every entry written ahead (and Celery's own cleanup entry, which beat adds)
    assert {name for name, _ in pending} == {*names, "celery.backend_cleanup"}


@pytest.mark.promise("periodic-relative-as-celery")
def test_a_relative_entry_of_two_and_a_half_seconds_runs_on_whole_seconds_two_apart(
    make_app, redis_server, redis_client
) -> None:
    """Celery's beat cuts each run of a relative interval under a minute to the second:
    2.5 s after a run at 10:00:02 is 10:00:04.5, run at 10:00:04."""
    settings: dict[str, Any] = {"beat_schedule": {}}
    app = make_app()
    every = schedules.schedule(timedelta(seconds=2.5), relative=True)
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, settings))
        stack.enter_context(beat(redis_server.url, settings))
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
            periodic.upsert(app, "relative", TICK, every)
        wait_until(lambda: len(occurrences(redis_client, "relative")) >= 4, timeout=60)
    found = periodic.get(app, "relative")
    assert found is not None
    seen = occurrences(redis_client, "relative")
    assert [when for when, count in seen.items() if count > 1] == []
    # the first run is 2.5 s after the entry was made, cut to the second; then every 2 s
    first = (found.entry.anchor + timedelta(seconds=2.5)).replace(microsecond=0)
    start = min(seen)
    assert (start - first) % timedelta(seconds=2) == timedelta(0)
    assert sorted(seen) == [start + timedelta(seconds=2 * n) for n in range(len(seen))]
    # and the worker was handed each one due at its occurrence
    for run in runs(redis_client):
        if run.get("entry") == "relative":
            assert datetime.fromisoformat(run["eta"]) == datetime.fromisoformat(run["occurrence"])


ENTRIES = 40


def pending_headers(app) -> list[dict[str, Any]]:
    with open_store(app) as store:
        return [
            json.loads(message.record.payload)["headers"]
            for message in store.pending(limit=100_000)
        ]


CATCH_UP = {
    policy: {"task": TICK, "schedule": 1.0, "catch_up": policy}
    for policy in ("all", "latest", "none")
}


def test_every_beat_down_past_the_horizon_then_one_back_follows_each_catch_up(
    make_app, redis_server, redis_client
) -> None:
    """The workers run what was written ahead (4 s), then nothing is written for a while;
    a beat back writes the missed occurrences as each entry's catch_up says."""
    settings = {"delayq_periodic_horizon": 4, "beat_schedule": CATCH_UP}
    app = make_app()
    queue = app.conf.task_default_queue
    with worker(redis_server.url, settings):
        with beat(redis_server.url, settings):
            wait_until(
                lambda: all(len(occurrences(redis_client, p)) >= 2 for p in CATCH_UP), timeout=60
            )
        with open_store(app) as store:
            written_up_to = {p: Mark.parse(store.ahead_mark(queue, p)) for p in CATCH_UP}
        last_written = max(mark.up_to_ms for mark in written_up_to.values())
        # every beat down: what was written runs, then 3 occurrences or more go unwritten
        wait_until(lambda: time.time() * 1000 > last_written + 3_500, timeout=30)
        with beat(redis_server.url, settings):
            back = datetime.now(timezone.utc)
            wait_until(
                lambda: all(
                    max(occurrences(redis_client, p)) > back + timedelta(seconds=2)
                    for p in CATCH_UP
                ),
                timeout=60,
            )
    for policy in CATCH_UP:
        seen = occurrences(redis_client, policy)
        assert [when for when, count in seen.items() if count > 1] == []
        first, last = min(seen), max(seen)
        grid = {
            first + timedelta(seconds=n) for n in range(round((last - first).total_seconds()) + 1)
        }
        not_run = sorted(grid - set(seen))
        found = periodic.get(app, policy)
        assert found is not None
        history = found.history
        up_to = datetime.fromtimestamp(written_up_to[policy].up_to_ms / 1000, timezone.utc)
        assert history.late + history.missed >= 3, policy
        assert len(not_run) == history.missed, policy
        if not_run:  # the missed ones not run are those right after the last written
            assert not_run[0] == up_to + timedelta(seconds=1), policy
            assert not_run[-1] - not_run[0] == timedelta(seconds=len(not_run) - 1), policy
        if policy == "all":
            assert not_run == []
        elif policy == "latest":
            assert history.late == 1
            assert not_run[-1] + timedelta(seconds=1) in seen  # the latest ran, late
        else:
            assert history.late == 0


def test_two_beats_write_entries_on_a_redis_cluster_store_once(
    make_app, redis_server, redis_client, cluster_store_url
) -> None:
    """The schedule on 3 masters, each queue in 4 shards: every entry's mark and
    occurrences in one slot; each occurrence runs once."""
    schedule = {f"c{n}": {"task": TICK, "schedule": 1.0} for n in range(4)}
    settings = {
        "delayq_store_url": cluster_store_url,
        "delayq_store_shards": 4,
        "beat_schedule": schedule,
    }
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, settings))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url, settings))
        wait_until(
            lambda: all(len(occurrences(redis_client, name)) >= 5 for name in schedule),
            timeout=60,
        )
    for name in schedule:
        assert_each_ran_once_without_gaps(occurrences(redis_client, name), timedelta(seconds=1))


@pytest.mark.promise("periodic-next-runs-run")
def test_an_entry_resumed_just_before_an_occurrence_first_runs_the_one_get_names(
    make_app, redis_server, redis_client
) -> None:
    """Resumed 4 s before an occurrence (within the settle window an upsert keeps), the
    entry's first run is that occurrence, the one ``get`` names as next."""
    app = make_app()
    settle = OccurrenceWriter(app).settle
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url))
        stack.enter_context(beat(redis_server.url))
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
            periodic.upsert(app, "slow-tick", TICK, 10.0)
        paused = periodic.pause(app, "slow-tick")
        found = periodic.get(app, "slow-tick")
        assert found is not None and found.version == paused.version
        after = datetime.now(timezone.utc) + settle + timedelta(seconds=4)
        target = found.entry.occurrences().after(after)
        assert target is not None
        wait_until(lambda: datetime.now(timezone.utc) >= target - timedelta(seconds=4), timeout=30)
        periodic.resume(app, "slow-tick")
        resumed_at = datetime.now(timezone.utc)
        named = periodic.get(app, "slow-tick")
        assert named is not None
        wait_until(
            lambda: [w for w in occurrences(redis_client, "slow-tick") if w > resumed_at],
            timeout=60,
        )
    first = min(when for when in occurrences(redis_client, "slow-tick") if when > resumed_at)
    assert first == named.next_runs[0]
    assert first - resumed_at < settle  # one a resume after the settle window would skip


#: The race of a beat's pass with upserts: many entries (each pass writes every one of
#: them), the upserted ones last in the pass's order; upserts 2 to 4 s apart.
BALLAST, HOT, UPSERTS = 390, 10, 60


@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore::celery_delayq.periodic.manage.UnknownTaskWarning")
@pytest.mark.promise("periodic-versions-forward")
def test_upserts_while_two_beats_pass_over_many_entries_never_run_an_older_version(
    make_app, redis_server, redis_client
) -> None:
    """Two beats pass over 400 entries while argument-only upserts land: a beat that read
    the entries before an upsert must not write the old version back. Every occurrence
    due after an upsert's settle window runs that upsert's arguments, or a later one's."""
    ballast = {  # routed to a queue no worker consumes: they only make each pass long
        f"b{n:03}": {"task": TICK, "schedule": 2.0, "options": {"queue": "ballast"}}
        for n in range(BALLAST)
    }
    hot = {f"z{n:02}": {"task": TICK, "schedule": 1.0, "args": [0]} for n in range(HOT)}
    settings = {"delayq_periodic_horizon": 20, "beat_schedule": {**ballast, **hot}}
    app = make_app(delayq_periodic_horizon=20)
    settle = OccurrenceWriter(app).settle
    upserts: dict[str, list[tuple[datetime, int]]] = {name: [] for name in hot}
    pace = random.Random(36)
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, settings))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url, settings, timeout=90))
        wait_until(
            lambda: all(occurrences(redis_client, name) for name in hot), timeout=90, interval=0.2
        )
        for version in range(1, UPSERTS + 1):
            name = f"z{version % HOT:02}"
            moment = datetime.now(timezone.utc)
            periodic.upsert(app, name, TICK, 1.0, args=(version,), now=moment)
            upserts[name].append((moment, version))
            # paced by the runs of the upserted entries: 10 a second
            paced = redis_client.llen("test:runs") + pace.randint(2 * HOT, 4 * HOT)
            wait_until(lambda ran=paced: redis_client.llen("test:runs") >= ran, timeout=30)
        # every beat passed twice since each entry's last upsert, and what it wrote ran
        settled = {name: max(upserts[name])[0] + settle for name in hot}
        wait_until(
            lambda: all(
                max(occurrences(redis_client, name)) > settled[name] + timedelta(seconds=12)
                for name in hot
            ),
            timeout=90,
            interval=0.2,
        )
    older, checked = [], 0
    for run in runs(redis_client):
        if run.get("entry") not in upserts:
            continue
        when = datetime.fromisoformat(run["occurrence"])
        due = [version for moment, version in upserts[run["entry"]] if when > moment + settle]
        if due:
            checked += 1
            if run["args"][0] < max(due):
                older.append((run["entry"], when.isoformat(), run["args"][0], max(due)))
    assert checked > 10 * UPSERTS
    assert older == []


@pytest.mark.promise(
    "periodic-one-off-once",
    "periodic-rrule",
    "periodic-total-run-count",
    "periodic-start-and-expires",
)
def test_with_two_beats_a_one_off_runs_once_and_a_counted_rule_its_count(
    make_app, redis_server, redis_client
) -> None:
    """Two beats run: a one-off interval from beat_schedule, then, added at run time, a
    clocked entry, an rrule with COUNT=3 and an entry between a start time and its
    expiry. The 1-second tick runs on past them all, so whatever else would have run has
    run when they are checked."""
    one_off = {"task": TICK, "schedule": 1.0, "one_off": True, "description": "first only"}
    settings = {"beat_schedule": {**SETTINGS["beat_schedule"], "one-off": one_off}}
    app = make_app()
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, settings))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url, settings))
        start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=10)
        rule = f"DTSTART:{start:%Y%m%dT%H%M%S}Z\nRRULE:FREQ=SECONDLY;INTERVAL=2;COUNT=3"
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
            periodic.upsert(app, "once", TICK, periodic.clocked(start))
            periodic.upsert(app, "thrice", TICK, rule)
            end = start + timedelta(seconds=2)
            periodic.upsert(app, "window", TICK, 1.0, start_time=start, expires=end)
        thrice = [start + timedelta(seconds=n) for n in (0, 2, 4)]
        wait_until(
            lambda: (
                max(occurrences(redis_client), default=start) > thrice[-1] + timedelta(seconds=3)
            ),
            timeout=60,
        )
    assert occurrences(redis_client, "once") == Counter({start: 1})
    assert list(occurrences(redis_client, "one-off").values()) == [1]
    assert occurrences(redis_client, "thrice") == Counter(dict.fromkeys(thrice, 1))
    window = [start + timedelta(seconds=n) for n in (0, 1, 2)]  # at its start, to its end
    assert occurrences(redis_client, "window") == Counter(dict.fromkeys(window, 1))
    for name, count in (("once", 1), ("one-off", 1), ("thrice", 3), ("window", 3)):
        info = periodic.get(app, name)
        assert info is not None and info.next_runs == [], name  # ended
        assert info.history.total_run_count == count, name
    told = periodic.get(app, "one-off")
    assert told is not None and told.entry.description == "first only"
