"""The move batch sizer (core/batching.py) on modelled calls: a call of ``n`` messages
lasts a part that does not grow with them (the round trip, a mover thread's wait for
the interpreter lock) plus a cost per message. The sizer sees only the total, as the
mover's wall time; these tests check what it makes of it. The calls against a real Redis
are in tests/core/moving/test_mover.py."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import celery_delayq
from celery_delayq.core.batching import (
    AIM,
    FIRST,
    FIXED_CHARGED,
    LEAST,
    RELEASE_WEIGHT,
    STEP,
    WINDOW,
    BatchSizer,
)

pytestmark = pytest.mark.unit

BUDGET = 0.002
MOST = 500
#: Overheads (s) taking turns, as the waits of a busy mover thread do: mostly long, the
#: least 0.4 ms.
SPREAD = (0.0025, 0.0004, 0.0052, 0.0011, 0.0007, 0.0031, 0.0004, 0.0018)


def drive(
    sizer: BatchSizer,
    calls: int,
    overhead: Callable[[int], float],
    cost: float,
    tail_every: int = 0,
) -> list[int]:
    """Make ``calls`` calls: each takes its whole batch, but every ``tail_every``-th
    takes 1 message (a pass's last call); returns the batch sizes asked for."""
    sizes = []
    for i in range(calls):
        limit = sizer.size
        taken = 1 if tail_every and i % tail_every == tail_every - 1 else limit
        sizer.observe(limit, taken, overhead(i) + cost * taken)
        sizes.append(limit)
    return sizes


def test_a_fixed_part_of_the_budget_or_more_does_not_pin_the_batch_at_the_least():
    """1.5 ms a call whatever its size (more than the 1 ms the calls aim at) made every
    batch look dear: the size sat at the least. With the fixed part estimated from a
    pass's last, small calls, the batch grows until a call's whole time is the budget
    (the bound that holds whatever the estimate), and no further."""
    sizer = BatchSizer(MOST, BUDGET)
    sizes = drive(sizer, 400, lambda i: 0.0015, 10e-6, tail_every=10)

    settled = set(sizes[-100:]) - {1}
    assert min(settled) >= 4 * LEAST
    assert all(0.0015 + 10e-6 * size <= BUDGET * 1.02 for size in settled)


def test_with_the_fixed_part_estimated_the_messages_aim_at_a_share_of_the_budget():
    """0.8 ms fixed, 10 µs a message: the messages' own time, with the fixed part up to
    ``FIXED_CHARGED`` of the aim, aims at AIM of the budget (75 messages), not the whole
    call's (20)."""
    sizer = BatchSizer(MOST, BUDGET)
    sizes = drive(sizer, 400, lambda i: 0.0008, 10e-6, tail_every=10)

    wanted = AIM * BUDGET * (1 - FIXED_CHARGED) / 10e-6
    assert set(sizes[-100:]) <= {round(wanted) - 1, round(wanted), round(wanted) + 1}


def test_a_busy_mover_threads_waits_do_not_pin_the_batch_either():
    """Waits of 0.4 to 5.2 ms taking turns (most calls over the budget on their own):
    the least of them is the fixed part; the batch grows past the least, and the calls'
    own time stays within the budget."""
    sizer = BatchSizer(MOST, BUDGET)
    sizes = drive(sizer, 800, lambda i: SPREAD[i % len(SPREAD)], 10e-6, tail_every=10)

    settled = set(sizes[-200:]) - {1}
    assert min(settled) >= 4 * LEAST
    assert max(settled) * 10e-6 <= BUDGET


@pytest.mark.parametrize("cost", [40e-6, 100e-6, 1e-3])
def test_a_genuinely_dear_message_still_shrinks_the_batch(cost):
    """A small fixed part and dear messages (big payloads, releases): the size comes down
    to what takes AIM of the budget with the fixed part, at least ``LEAST``."""
    sizer = BatchSizer(MOST, BUDGET)
    sizes = drive(sizer, 200, lambda i: 0.0001, cost, tail_every=10)

    wanted = max(LEAST, round((AIM * BUDGET - 0.0001) / cost))  # 0.1 ms counted in full
    assert set(sizes[-50:]) <= {wanted, wanted + 1}
    assert max(sizes[-50:]) * cost <= BUDGET or max(sizes[-50:]) == LEAST


def test_calls_over_the_budget_bring_the_batch_back():
    """Cheap messages let the batch grow to the most; then each costs 50 µs (a queue of
    big payloads): once the window has forgotten the cheap calls, the batch comes down by
    ``STEP`` a call to what the budget allows."""
    sizer = BatchSizer(MOST, BUDGET)
    drive(sizer, 100, lambda i: 0.001, 1e-6, tail_every=10)
    assert sizer.size == MOST

    sizes = drive(sizer, 40, lambda i: 0.001, 50e-6, tail_every=10)

    shrinking = math.ceil(math.log(MOST / LEAST, STEP))
    assert max(sizes[WINDOW + shrinking + 2 :]) * 50e-6 <= BUDGET
    assert AIM * BUDGET / 2 <= sizes[-1] * 50e-6 <= AIM * BUDGET
    assert all(after * STEP >= before - 1 for before, after in zip(sizes, sizes[1:]))


def test_calls_of_one_size_cannot_make_the_messages_look_free():
    """Every call full and of one size, their waits spread: no call is clearly smaller,
    so nothing is subtracted, and the size stays where the calls' whole time per message
    puts it (at most AIM of the budget for the messages alone)."""
    sizer = BatchSizer(MOST, BUDGET)
    sizes = drive(sizer, 400, lambda i: SPREAD[i % len(SPREAD)], 10e-6)

    assert max(sizes[20:]) * 10e-6 <= AIM * BUDGET
    assert sizer.size >= LEAST


def test_a_call_of_releases_short_of_its_batch_by_less_than_a_release_is_full():
    """A release uses ``RELEASE_WEIGHT`` of the batch, so a batch of 10 allows 3 releases,
    9: a quick call of 9 is full and lets the batch grow; one of 7 is not."""
    sizer = BatchSizer(MOST, BUDGET)
    sizer.size = LEAST
    sizer.observe(LEAST, LEAST - RELEASE_WEIGHT, 0.0003)
    assert sizer.size == LEAST

    sizer.observe(LEAST, LEAST - RELEASE_WEIGHT + 1, 0.0003)
    assert sizer.size == LEAST * STEP


def test_the_release_weight_is_the_one_the_scripts_use():
    gates = Path(celery_delayq.__file__).parent / "core" / "lua" / "gates.lua"
    found = re.search(r"^local RELEASE_WEIGHT = (\d+)$", gates.read_text(), re.MULTILINE)
    assert found and int(found.group(1)) == RELEASE_WEIGHT


@pytest.mark.parametrize(
    ("limit", "taken", "seconds"),
    [
        (64, 0, 0.001),
        (64, -5, 0.001),
        (64, 64, 0.0),
        (64, 64, -1.0),
        (64, 64, math.nan),
        (64, 64, math.inf),
        (64, 10**12, 1e-9),
        (64, 1, 10.0),
        (-3, 5, 0.001),
    ],
)
def test_crafted_or_empty_calls_keep_the_size_within_its_bounds(limit, taken, seconds):
    """A call's count comes from Redis's reply, which may be crafted: whatever it says,
    the size stays between ``LEAST`` and the most, never moves by more than ``STEP``, and
    nothing raises."""
    sizer = BatchSizer(MOST, BUDGET)
    sizer.observe(limit, taken, seconds)
    sizer.observe(limit, taken, seconds)

    assert LEAST <= sizer.size <= MOST
    assert FIRST / STEP**2 <= sizer.size <= FIRST * STEP**2 or sizer.size == LEAST
    assert math.isfinite(sizer.longest)


def test_without_a_budget_the_size_is_the_most():
    sizer = BatchSizer(MOST, 0)
    drive(sizer, 20, lambda i: 0.01, 1e-3)
    assert sizer.size == MOST
