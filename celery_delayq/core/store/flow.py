"""Reading flow control's buckets (lua/gates.lua) for people: per bucket its limits,
what waits, what was released of late, what runs, and what holds it back.

Read-only, and in bounded steps however many buckets (limit keys) a queue has: the
buckets are found by ZSCAN of the ready set (buckets with messages waiting) and of the
bucket index (those with none waiting whose state still matters: paused, throttled,
running, or counting releases), ``SCAN_COUNT`` members a step, never by a SCAN of the
keyspace; ``READ_CHUNK`` buckets are read per pipelined round trip. An index member whose
time is past, or whose keys hold nothing (crafted, or expired a moment ago), is left out.
A bucket's running slots are counted as the release would count them (leases not run
out), without dropping the run-out ones. Releases in a limit's current window are counted
from the release log, at most its newest ``LOG_READ`` entries in one read: a window
reaching past them is reported as counted short (``BucketState.window_short``). Each
task's released count comes from the shard's count per task, which never goes back
(a bucket's own count goes with its state).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import Any

from redis.exceptions import ResponseError

from ..layout.gates import GateSpec
from ..layout.keys import QueueKeys
from ..redis_replies import list_reply
from ..results import BucketState, TaskFlow
from .state import StoreState

#: Members one ZSCAN or HSCAN step asks Redis to look at.
SCAN_COUNT = 1000
#: Buckets read per pipelined round trip.
READ_CHUNK = 500
#: Most release-log entries read, in one LRANGE (a few hundred kB).
LOG_READ = 10_000
#: A log entry: "<us> <bucket>" (lua/gates.lua).
_LOG_ENTRY = re.compile(rb"(\d{1,19}) (.+)\Z", re.DOTALL)
INF = float("inf")
#: The latest moment a date can hold (9999-12-31, epoch seconds): a later time read from
#: Redis (a crafted one) reads as never.
LATEST = 253_402_300_799


class FlowReader:
    """The flow-control buckets of a queue, as they stand."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def buckets(self, queue: str, log_entries: int) -> list[BucketState]:
        """Every bucket of every shard of ``queue``, sorted by shard and name.
        ``log_entries``: how many of the newest releases to count the limits' windows
        from, at most LOG_READ (``delayq_release_log``, as many as the log keeps; 0:
        no count)."""
        seconds, micros = self.state.client.time()
        now_us = int(seconds) * 1_000_000 + int(micros)
        found = []
        for keys in self.state.keys.shards_of(queue):
            ready = self._names(keys, now_us // 1000)
            log = _ReleaseLog.read(self.state.client, keys, min(log_entries, LOG_READ))
            names = sorted(ready)
            for start in range(0, len(names), READ_CHUNK):
                chunk = names[start : start + READ_CHUNK]
                found += self._read(keys, chunk, ready, log, now_us)
        return found

    def task_flows(self) -> list[TaskFlow]:
        """Every queue's buckets added up per queue and task (no release log read), with
        each task's released count."""
        queues = self.state.queues()
        buckets = [b for q in queues for b in self.buckets(q, 0)]
        return TaskFlow.per_task(buckets, self.released(queues))

    def released(self, queues: list[str]) -> dict[tuple[str, str], int]:
        """(queue, task) -> its messages released by flow control, ever (every shard's
        count added up; a crafted count reads as 0)."""
        counts: dict[tuple[str, str], int] = {}
        for queue in queues:
            for keys in self.state.keys.shards_of(queue):
                for task, count in self._pairs("hscan_iter", keys.gate_released):
                    name = (queue, bytes(task).decode("utf-8", "backslashreplace"))
                    counts[name] = counts.get(name, 0) + _number(count)
        return counts

    def _names(self, keys: QueueKeys, now_ms: int) -> dict[bytes, float | None]:
        """The shard's buckets -> when the next of its waiting messages may go (us;
        None: nothing waits)."""
        ready: dict[bytes, float | None] = {
            bytes(name): float(at) for name, at in self._pairs("zscan_iter", keys.gate_ready)
        }
        for name, until in self._pairs("zscan_iter", keys.gate_index):
            if float(until) >= now_ms:
                ready.setdefault(bytes(name), None)
        return ready

    def _pairs(self, scan: str, key: str) -> Iterator[tuple[Any, Any]]:
        """Each (member, score) or (field, value) of a zset or hash, ``SCAN_COUNT`` a
        step; none when the key holds another type (written by hand)."""
        try:
            yield from getattr(self.state.client, scan)(key, count=SCAN_COUNT)
        except ResponseError:
            return

    def _read(
        self,
        keys: QueueKeys,
        names: list[bytes],
        ready: dict[bytes, float | None],
        log: _ReleaseLog,
        now_us: int,
    ) -> list[BucketState]:
        prefix = keys.gates.encode("utf-8", "surrogatepass")
        now_ms = now_us // 1000
        with self.state.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.llen(prefix + b"w:" + name)
                pipe.hmget(prefix + b"s:" + name, ["spec", "hold", "released"])
                pipe.zcount(prefix + b"r:" + name, f"({now_ms}", "+inf")
            # a key of another type (written by hand) reads as absent, not as a failed page
            replies = iter(
                None if isinstance(reply, Exception) else reply
                for reply in pipe.execute(raise_on_error=False)
            )
        found = []
        for name in names:
            waiting, fields, running = next(replies), next(replies), next(replies)
            spec, hold, released = fields or (None, None, None)
            if not (waiting or spec or hold or released or running) and ready[name] is None:
                continue  # an index member with nothing (left): no bucket
            limits = GateSpec.decode(spec.decode("ascii", "replace")) if spec else None
            windows = [rate.seconds * 1_000_000 for rate in limits.rates] if limits else []
            in_window, short = log.counts(name, windows, now_us)
            at = ready[name]
            found.append(
                BucketState(
                    queue=keys.queue,
                    shard=keys.shard,
                    name=name,
                    limits=limits,
                    waiting=int(waiting or 0),
                    released=_number(released),
                    in_window=in_window,
                    window_short=short,
                    running=int(running or 0),
                    held_until=_hold(hold, now_us),
                    next_release=None if at is None else _seconds(at),
                    now=now_us / 1_000_000,
                )
            )
        return found


def release_times(entries: list[bytes]) -> dict[bytes, list[int]]:
    """Each bucket's release times (us), oldest first, from release-log entries as
    LRANGE reads them (newest first); an entry this store did not write is left out."""
    times: dict[bytes, list[int]] = {}
    for entry in reversed(entries):
        found = _LOG_ENTRY.match(entry)
        if found is not None:
            times.setdefault(found.group(2), []).append(int(found.group(1)))
    return times


class _ReleaseLog:
    """The newest entries of a queue shard's release log, by bucket."""

    def __init__(self, times: dict[bytes, list[int]], oldest: int | None, kept: bool) -> None:
        self.times = times  # bucket -> its release times (us), oldest first
        self.oldest = oldest  # the oldest entry read, when the read may have ended early
        self.kept = kept  # whether a log is kept at all

    @classmethod
    def read(cls, client: Any, keys: QueueKeys, most: int) -> _ReleaseLog:
        if most <= 0:
            return cls({}, None, False)
        entries = list_reply(client.lrange(keys.gate_log, 0, most - 1))
        times = release_times(entries)
        oldest = None
        if len(entries) >= most:  # full as far as read: older releases may be left out
            last = _LOG_ENTRY.match(entries[-1])
            oldest = int(last.group(1)) if last else None
        return cls(times, oldest, True)

    def counts(
        self, bucket: bytes, windows_us: list[int], now_us: int
    ) -> tuple[tuple[int, ...] | None, bool]:
        """Releases of ``bucket`` in each window ending now, and whether any window
        reaches past the oldest entry read (its count may be short)."""
        if not self.kept:
            return None, False
        times = self.times.get(bucket, [])
        counts = tuple(len(times) - bisect.bisect_right(times, now_us - w) for w in windows_us)
        short = self.oldest is not None and any(self.oldest > now_us - w for w in windows_us)
        return counts, short


def _number(value: bytes | None) -> int:
    """A count or time as this store writes one; 0 for anything else (a crafted value:
    not a number, negative, or past what Redis counts to)."""
    try:
        number = int(value) if value else 0
    except ValueError:
        return 0
    return number if 0 <= number < 2**63 else 0


def _hold(value: bytes | None, now_us: int) -> float | None:
    """A state's hold as epoch seconds (inf: paused), None when none is in force."""
    if value == b"paused":
        return INF
    held = _number(value)
    return _seconds(held) if held > now_us else None


def _seconds(us: float) -> float:
    """Microseconds as epoch seconds, a time no date can hold as never (inf)."""
    seconds = us / 1_000_000
    return seconds if seconds <= LATEST else INF
