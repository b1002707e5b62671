"""How a flow-controlled message names its gate: the limits it waits under, and its bucket.

A task with a rate or concurrency limit is released through a gate (lua/gates.lua). Its
messages wait in the store, in a bucket per task (or per task and limit key, one bucket
each key), and leave it when every limit of the bucket allows. The record carries the gate
as ``<spec> <bucket>`` (record.py's ``l`` field), so the release needs no other lookup
and a publisher's latest settings take effect with its next message.

The rule is GCRA without a burst: releases are evenly spaced, as Celery's own
``rate_limit`` spaces a worker's starts (a token bucket holding one token). For a limit of
``n`` per ``p`` seconds, each release moves the bucket's theoretical arrival time on by
``p / (n - c)``, and a release late by up to ``c`` intervals (a mover that woke late)
may be caught up, with ``c = CATCH_UP * n``. Every release then has a logical time, at most
``c`` intervals before its real one, and logical times are at least an interval apart: in
any window of ``p`` seconds the releases' logical times span under ``p + c`` intervals of
``p / (n - c)``, that is under ``n`` intervals, so never more than ``n`` releases. While a
backlog lasts the rate is ``(1 - CATCH_UP) * n`` per ``p``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: The share of a limit's count a late release may catch up (see above): the sustained
#: rate is this much below the limit, and a mover may wake this late without losing pace.
CATCH_UP = 0.03
#: Seconds per rate unit: Celery's own ``s``, ``m``, ``h``, and a day.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*([smhd]))?\s*\Z")
#: Separates a bucket's task name from its limit key (no task name holds it).
KEY_SEPARATOR = "\x00"
#: Most rates one bucket holds (lua/gates.lua reads no more).
MOST_RATES = 8
#: One token of an encoded spec, as lua/gates.lua's read_spec matches it: ASCII digits,
#: any number of them (a spec is read from Redis, and may be crafted).
_TOKEN = re.compile(r"([rc])([0-9]+)/([0-9]+)\Z")
#: Longest limit key, in bytes (it is part of several Redis key names).
MOST_KEY_BYTES = 512
#: Longest interval between releases (us) a rate may ask for, and so slowest rate: one in
#: 366 days (lua/gates.lua ignores a longer one, as a crafted spec's).
MOST_INTERVAL_US = 366 * 86400 * 1_000_000
#: Longest slot lease (ms) a spec may ask for (lua/gates.lua ignores a longer one).
MOST_LEASE_MS = MOST_INTERVAL_US // 1000
#: The concurrency read from a spec asking for more: no count of running slots reaches
#: either, so the bucket never waits for a slot, though its releases take one (as Lua's).
MOST_READ_CONCURRENCY = 2**53


class InvalidLimit(ValueError):
    """A rate or concurrency limit that cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class Rate:
    """``count`` releases per ``seconds``."""

    count: float
    seconds: int

    @classmethod
    def parse(cls, text: object) -> Rate:
        """A rate as Celery writes one: ``"10/s"``, ``"100/m"``, ``"5/h"``, a number (per
        second), and ``"/d"`` for a day."""
        if isinstance(text, Rate):
            return text
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = str(text)
        found = _RATE.match(text) if isinstance(text, str) else None
        if found is None or float(found.group(1)) <= 0:
            raise InvalidLimit(
                f"{text!r} is not a rate limit: write it as Celery does, a positive number "
                'per "s", "m", "h" (or here "d"), e.g. "10/s", "100/m", "100000/d"'
            )
        rate = cls(float(found.group(1)), UNITS[found.group(2) or "s"])
        # compared before rounding: a tiny count's interval is no integer (inf)
        if not rate.seconds * 1_000_000 / ((1 - CATCH_UP) * rate.count) <= MOST_INTERVAL_US:
            raise InvalidLimit(f"{text!r} is slower than the slowest rate, one in 366 days")
        return rate

    def interval_us(self) -> int:
        """Microseconds between releases, the catch-up taken off the count (see above).
        Rounded up: a shorter interval would let one release too many into a window."""
        return math.ceil(self.seconds * 1_000_000 / ((1 - CATCH_UP) * self.count))

    def catch_up_us(self) -> int:
        """How late (us) a release may be and still keep its logical time."""
        return math.floor(CATCH_UP * self.seconds * 1_000_000 / (1 - CATCH_UP))

    @classmethod
    def decode(cls, interval_us: int, catch_up_us: int) -> Rate:
        """The rate an encoded ``r<interval us>/<catch-up us>`` was most likely written as:
        its unit from the catch-up, and the roundest count that encodes to the same
        interval (many counts do, ``interval_us`` rounding up)."""
        period = catch_up_us * (1 - CATCH_UP) / CATCH_UP / 1_000_000
        seconds = min(UNITS.values(), key=lambda unit: abs(math.log(max(period, 1e-6) / unit)))
        interval = max(interval_us, 1)
        least = seconds * 1_000_000 / ((1 - CATCH_UP) * interval)  # those encoding to it
        for digits in range(1, 18):
            step = 10.0 ** (math.floor(math.log10(least)) - digits + 2)
            count = round(math.ceil(least / step) * step, 12)
            if cls(count, seconds).interval_us() == interval:
                return cls(count, seconds)
        return cls(least, seconds)

    def __str__(self) -> str:
        unit = next(name for name, seconds in UNITS.items() if seconds == self.seconds)
        count = int(self.count) if self.count.is_integer() else self.count
        return f"{count}/{unit}"


@dataclass(frozen=True)
class GateSpec:
    """The limits one task's messages are released under."""

    rates: tuple[Rate, ...] = ()
    concurrency: int | None = None  # most running at once
    lease_ms: int = 60_000  # how long a slot is held without a renewal (a dead worker's)

    def __bool__(self) -> bool:
        return bool(self.rates) or self.concurrency is not None

    def encode(self) -> str:
        """As the record carries it: ``r<interval us>/<catch-up us>`` per rate and
        ``c<most>/<lease ms>``, comma-separated (lua/gates.lua reads it)."""
        parts = [f"r{rate.interval_us()}/{rate.catch_up_us()}" for rate in self.rates]
        if self.concurrency is not None:
            parts.append(f"c{self.concurrency}/{self.lease_ms}")
        return ",".join(parts)

    @classmethod
    def decode(cls, spec: str) -> GateSpec:
        """The limits an encoded spec holds, exactly as lua/gates.lua's read_spec reads
        them (a spec is read from Redis): numbers as Lua's (doubles), at most MOST_RATES
        rates, and any other token ignored, a rate or lease too long among them."""
        rates: list[Rate] = []
        concurrency, lease_ms = None, cls.lease_ms
        for token in spec.split(","):
            found = _TOKEN.match(token)
            if found is None:
                continue
            # float, as Lua's tonumber: any number of digits, and no int() of thousands
            kind, a, b = found.group(1), float(found.group(2)), float(found.group(3))
            if kind == "r" and len(rates) < MOST_RATES and max(a, b) <= MOST_INTERVAL_US:
                rates.append(Rate.decode(int(a), int(b)))
            elif kind == "c" and b <= MOST_LEASE_MS:
                concurrency, lease_ms = int(min(a, MOST_READ_CONCURRENCY)), int(b)
        return cls(tuple(rates), concurrency, lease_ms)

    def __str__(self) -> str:
        """As a user would write the limits: ``"10/s, 100/m, 5 at once"``."""
        parts = [str(rate) for rate in self.rates]
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        return ", ".join(parts) or "none"


def bucket_of(task: str, key: str | None = None) -> str:
    """The bucket a task's message waits in: the task's, or its limit key's."""
    return task if key is None else f"{task}{KEY_SEPARATOR}{key}"


def split_bucket(bucket: str) -> tuple[str, str | None]:
    """The task name and limit key (None: the task's own bucket) of a bucket."""
    task, separator, key = bucket.partition(KEY_SEPARATOR)
    return task, key if separator else None


def gate_field(spec: str, bucket: str) -> bytes:
    """The record's gate: ``<spec> <bucket>`` (spec: ``GateSpec.encode``)."""
    return f"{spec} {bucket}".encode("utf-8", "surrogatepass")


def shard_key(gate: bytes) -> bytes:
    """What a gated message's shard is chosen by: its bucket, so that one bucket's
    messages wait in one shard, under one limit."""
    return b"\x05" + gate.partition(b" ")[2]


def bucket_shard_key(bucket: str) -> bytes:
    """``shard_key`` of any gate of ``bucket``: where a hold on the
    bucket goes, and its running slots are (worker/flow/running_slots.py)."""
    return shard_key(gate_field("", bucket))
