"""The release rule of lua/gates.lua (layout/gates.py proves it) driven on a real Redis at
instants the test chooses: in every half-open window of a limit's length no more releases
than the limit allows, whatever the arrivals and however late or early the movers call;
every message released once; and the pace kept while a backlog lasts."""

from __future__ import annotations

import bisect
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_delayq.core.layout.gates import CATCH_UP, Rate
from tests.flow.harness import Gates, gate_of

pytestmark = pytest.mark.integration

RATES = ["1/s", "10/s", "7/m", "1000/s", "0.5/s", "3/s", "2/m", "100/s", "1/h", "7.5/m"]
FIXTURE_SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
#: Gaps between two calls (us): from a busy mover's to a mover that slept for minutes.
GAPS = st.one_of(
    st.integers(0, 3_000),
    st.integers(0, 300_000),
    st.integers(0, 30_000_000),
    st.integers(0, 150_000_000),
)


def most_in_window(times: list[int], window_us: int) -> int:
    """The most of ``times`` (sorted) in any half-open window [t, t + window): the worst
    window starts at a release."""
    return max(
        (bisect.bisect_left(times, t + window_us) - i for i, t in enumerate(times)), default=0
    )


def allowed(rate: Rate, windows: int) -> int:
    """Most releases in ``windows`` consecutive windows of the limit's length: its count
    times that, rounded up (a fractional limit, "0.5/s", cannot allow less than one)."""
    return math.ceil(rate.count * windows - 1e-9)


def check_limits(times: list[int], rates: tuple[str, ...]) -> None:
    for text in rates:
        rate = Rate.parse(text)
        for windows in (1, 2, 3):
            found = most_in_window(times, windows * rate.seconds * 1_000_000)
            assert found <= allowed(rate, windows), (
                f"{found} releases in {windows} window(s) of {text}: {times}"
            )


@pytest.mark.promise("flow-rate-never-more")
@settings(FIXTURE_SETTINGS, max_examples=60)
@given(
    buckets=st.lists(
        st.lists(st.sampled_from(RATES), min_size=1, max_size=3, unique=True).map(tuple),
        min_size=1,
        max_size=3,
    ),
    steps=st.lists(st.tuples(GAPS, st.integers(0, 2), st.integers(0, 12)), min_size=1, max_size=80),
    most=st.integers(1, 40),
)
def test_no_window_of_a_limit_holds_more_releases_than_it_allows(
    redis_client, buckets, steps, most
):
    redis_client.flushall()
    gates = Gates(redis_client)
    now = 1_800_000_000_000_000  # us; any instant: the rule only compares them
    bucket_of_key: dict[bytes, int] = {}
    released: dict[bytes, int] = {}

    def call(entering: list[bytes], most: int) -> None:
        for key in gates.call(now, entering, most):
            assert key not in released, f"{key!r} released twice"
            released[key] = now

    for gap, which, arrivals in steps:
        now += gap
        which %= len(buckets)
        entering = []
        for _ in range(arrivals):
            key = b"m%d" % len(bucket_of_key)
            bucket_of_key[key] = which
            gates.add(key, gate_of(buckets[which], key=str(which)))
            entering.append(key)
        call(entering, most)
    # then a mover that calls exactly when the first ready bucket may release
    for _ in range(len(bucket_of_key) + 10):
        ready = gates.ready()
        if not ready:
            break
        now = max(now, math.ceil(min(score for _, score in ready)))
        call([], most)

    assert set(released) == set(bucket_of_key), "a message was never released"
    for which, rates in enumerate(buckets):
        times = sorted(t for key, t in released.items() if bucket_of_key[key] == which)
        check_limits(times, rates)


@given(st.sampled_from(RATES))
def test_the_interval_and_catch_up_keep_the_proofs_bound(text):
    """The proof's arithmetic, as rounded: (window + catch-up) / interval <= count."""
    rate = Rate.parse(text)
    window = rate.seconds * 1_000_000
    assert (window + rate.catch_up_us()) / rate.interval_us() <= rate.count


def drive_backlog(gates: Gates, text: str, late_us: int, windows: int) -> list[int]:
    rate = Rate.parse(text)
    total = math.ceil(rate.count * windows) + 5
    gate = gate_of((text,))
    for n in range(total):
        gates.add(b"b%d" % n, gate)
    now = 1_800_000_000_000_000
    end = now + windows * rate.seconds * 1_000_000
    times = [now] * len(gates.call(now, [b"b%d" % n for n in range(total)], 1000))
    while now < end:
        ((_, score),) = gates.ready()
        now = max(now, math.ceil(score)) + late_us
        if now >= end:
            break
        times += [now] * len(gates.call(now, [], 1000))
    return times


@settings(FIXTURE_SETTINGS, max_examples=12)
@given(st.sampled_from(["1/s", "10/s", "7/m", "1000/s", "3/s"]), st.floats(0, 0.99))
def test_a_backlog_keeps_its_pace_when_the_mover_is_late_within_the_catch_up(
    redis_client, text, lateness
):
    """Sustained (1 - CATCH_UP) * n per window, also with each call late by up to the
    catch-up (a mover that wakes late loses no pace)."""
    redis_client.flushall()
    rate = Rate.parse(text)
    windows = 4 if rate.count < 100 else 2
    times = drive_backlog(Gates(redis_client), text, int(lateness * rate.catch_up_us()), windows)
    check_limits(times, (text,))
    assert len(times) >= math.floor((1 - CATCH_UP) * rate.count * windows) - 1


def test_a_rate_kept_through_a_change_of_the_spec_still_holds(redis_client):
    gates = Gates(redis_client)
    now = 1_800_000_000_000_000
    gates.add(b"a", gate_of(("100/s", "1/s")))
    gates.add(b"b", gate_of(("1/s",)))  # the publishers' settings changed meanwhile
    times = [now] * len(gates.call(now, [b"a"]))
    now += 20_000  # 20 ms: past 100/s's interval, far within 1/s's
    times += [now] * len(gates.call(now, [b"b"]))
    assert times == [now - 20_000]
