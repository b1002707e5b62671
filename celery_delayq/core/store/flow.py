"""Reading flow control's buckets (lua/gates.lua) for people: per bucket its limits,
what waits, what was released of late, what runs, and what holds it back.

Read-only, and in bounded steps however many buckets (limit keys) a queue has: the
buckets are found by ZSCAN of the ready set (buckets with messages waiting) and SCAN of
their state hashes (those with none waiting, still remembered), ``SCAN_COUNT`` keys a
step, and read ``READ_CHUNK`` buckets per pipelined round trip. The SCAN runs only in a
shard whose stats count a message that entered a bucket (``gated``): a queue without
flow control costs one HEXISTS. A bucket's running slots are counted as the release
would count them (leases not run out), without dropping the run-out ones. Releases in a
limit's current window are counted from the release log, at most its newest ``LOG_READ``
entries in one read: a window reaching past them is reported as counted short
(``BucketState.window_short``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import Any

from ..layout.gates import GateSpec
from ..layout.keys import QueueKeys
from ..redis_replies import list_reply
from ..results import BucketState, TaskFlow
from .state import StoreState

#: Keys one SCAN or ZSCAN step asks Redis to look at.
SCAN_COUNT = 1000
#: Buckets read per pipelined round trip.
READ_CHUNK = 500
#: Most release-log entries read, in one LRANGE (a few hundred kB).
LOG_READ = 10_000
#: A log entry: "<us> <bucket>" (lua/gates.lua).
_LOG_ENTRY = re.compile(rb"(\d{1,19}) (.+)\Z", re.DOTALL)
_GLOB_SPECIAL = re.compile(rb"([\\*?\[\]])")
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
            ready = self._names(keys)
            log = _ReleaseLog.read(self.state.client, keys, min(log_entries, LOG_READ))
            names = sorted(ready)
            for start in range(0, len(names), READ_CHUNK):
                chunk = names[start : start + READ_CHUNK]
                found += self._read(keys, chunk, ready, log, now_us)
        return found

    def task_flows(self) -> list[TaskFlow]:
        """Every queue's buckets added up per queue and task (no release log read)."""
        return TaskFlow.per_task([b for q in self.state.queues() for b in self.buckets(q, 0)])

    def _names(self, keys: QueueKeys) -> dict[bytes, float | None]:
        """The shard's buckets -> when the next of its waiting messages may go (us;
        None: nothing waits)."""
        client = self.state.client
        ready: dict[bytes, float | None] = {
            bytes(name): float(at)
            for name, at in client.zscan_iter(keys.gate_ready, count=SCAN_COUNT)
        }
        if not ready and not client.hexists(keys.stats, "gated"):
            return ready  # no message ever entered a bucket here: no SCAN of the keyspace
        prefix = keys.gate("s", "").encode("utf-8", "surrogatepass")
        for key in self._scan(prefix, keys):
            ready.setdefault(bytes(key)[len(prefix) :], None)
        return ready

    def _scan(self, prefix: bytes, keys: QueueKeys) -> Iterator[bytes]:
        """The keys that start with ``prefix``, ``SCAN_COUNT`` looked at a step (on a
        cluster, on the node holding the queue shard's slot)."""
        pattern = _GLOB_SPECIAL.sub(rb"\\\1", prefix) + b"*"
        client: Any = self.state.client
        if self.state.cluster:
            node = client.get_node_from_key(keys.gate_ready)
            return client.scan_iter(match=pattern, count=SCAN_COUNT, target_nodes=node)
        return client.scan_iter(match=pattern, count=SCAN_COUNT)

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
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


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
