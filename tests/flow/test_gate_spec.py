"""A bucket's spec is read in Python (GateSpec.decode: the status, and whether a message
names a running slot) exactly as the release reads it (lua/gates.lua's read_spec, run on a
real Redis): the same rates kept, the same concurrency limit or none, on any spec Redis may
hold, crafted ones included. A spec the release ignores is no limit in Python, and the
other way round."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_delayq.config.limits import SLOT_HEADER, mark_slot
from celery_delayq.core.layout.gates import (
    MOST_INTERVAL_US,
    MOST_LEASE_MS,
    MOST_READ_CONCURRENCY,
    GateSpec,
    Rate,
    gate_field,
)
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.lua import HELPERS, PRELUDE, read_source

pytestmark = pytest.mark.integration

#: ARGV[3..]: specs; returns, per spec, the count of its rates, each rate's interval and
#: catch-up (us), then most and lease, each as Lua holds it ("" for none).
READ_SPECS = (
    PRELUDE
    + HELPERS
    + read_source("gates")
    + """
local out = {}
for i = 3, #ARGV do
  local rates, most, lease = read_spec(ARGV[i])
  out[#out + 1] = #rates
  for _, rate in ipairs(rates) do
    out[#out + 1] = string.format('%.17g', rate[1])
    out[#out + 1] = string.format('%.17g', rate[2])
  end
  out[#out + 1] = most and string.format('%.17g', most) or ''
  out[#out + 1] = lease and string.format('%.17g', lease) or ''
end
return out
"""
)

LIMITED = GateSpec((Rate.parse("10/s"), Rate.parse("100000/d")), 3).encode()
TOO_LONG = MOST_INTERVAL_US + 1
CRAFTED = [
    "",
    ",",
    LIMITED,
    "c3/60000",
    "c3/60000,",
    ",,c3/60000",
    f"c3/{MOST_LEASE_MS}",
    f"c3/{MOST_LEASE_MS + 1}",  # a lease too long: no limit
    f"c3/60000,c4/{MOST_LEASE_MS + 1}",  # the last usable token counts
    "c3/60000,c4/5",
    "c0/0",
    "c" + "9" * 30 + "/1000",  # a count beyond any integer the release keeps exactly
    "c" + "9" * 400 + "/1000",  # beyond a double: inf in Lua
    "c" + "0" * 5000 + "7/" + "0" * 5000 + "1000",  # leading zeros, past int()'s digits
    "c3/" + "9" * 5000,
    "cc3/60000",
    "C3/60000",
    " c3/60000",
    "c3/60000 ",
    "c3/60000\n",
    "c-3/60000",
    "c3.5/60000",
    "c3/6e4",
    "c\u0663/60000",  # an Arabic-Indic digit: Python's \\d, not Lua's %d
    "c3/\uff16\uff10",  # fullwidth digits
    "x3/60000",
    "r1/1",
    "r0/0",
    f"r{MOST_INTERVAL_US}/{MOST_INTERVAL_US}",
    f"r{TOO_LONG}/1",
    f"r1/{TOO_LONG}",
    f"r{TOO_LONG}/1,r103093/30927",  # an ignored rate takes no place
    ",".join(["r103093/30927"] * 9),  # the ninth rate is ignored
    ",".join([f"r{TOO_LONG}/1"] * 9 + ["r103093/30927"]),
    "r103093/30927,c",
    "r" + "0" * 4400 + "5/30927",
]
#: Specs of tokens near the real ones: digits, signs, separators and a few other bytes.
TOKENS = st.one_of(
    st.builds(
        "{}{}/{}".format,
        st.sampled_from("rcx"),
        st.one_of(st.integers(0, 2 * MOST_INTERVAL_US), st.integers(0, 10**25)).map(str),
        st.one_of(st.integers(0, 2 * MOST_LEASE_MS), st.integers(0, 2 * MOST_INTERVAL_US)).map(str),
    ),
    st.text("rc0123456789/ ,.-e\u0663", max_size=12),
)
SPECS = st.lists(TOKENS, max_size=12).map(",".join)


def lua_reads(client: redis.Redis, specs: list[str]) -> list[tuple[list[Rate], str, str]]:
    """read_spec's answer for each spec: its rates (as decode makes a rate of the numbers
    it keeps), most and lease."""
    keys = KeySpace().for_queue("q")
    encoded = [spec.encode("utf-8") for spec in specs]
    reply = iter(client.eval(READ_SPECS, len(keys.move_keys()), *keys.move_keys(),
                             *keys.page_args(), *encoded))  # fmt: skip
    answers = []
    for _ in specs:
        rates = [Rate.decode(int(next(reply)), int(next(reply))) for _ in range(next(reply))]
        answers.append((rates, next(reply).decode(), next(reply).decode()))
    return answers


def check_agree(client: redis.Redis, specs: list[str]) -> None:
    for spec, (rates, most, lease) in zip(specs, lua_reads(client, specs)):
        # as a spec read from Redis is handed to decode (core/store/flow.py)
        read = GateSpec.decode(spec.encode("utf-8").decode("ascii", "replace"))
        assert read.rates == tuple(rates), spec[:80]
        if most == "":
            assert read.concurrency is None, spec[:80]
        else:
            assert read.concurrency == min(float(most), MOST_READ_CONCURRENCY), spec[:80]
            assert read.lease_ms == float(lease), spec[:80]
        if " " not in spec:  # a gate's spec ends at its first space
            # a message names a running slot exactly when its release takes one; a stale
            # name (a retry's) goes otherwise
            headers: dict[str, Any] = {SLOT_HEADER: ["old", "stale"]}
            mark_slot(headers, "q", gate_field(spec, "t"))
            assert headers.get(SLOT_HEADER) == (None if most == "" else ["q", "t"]), spec[:80]


def test_crafted_specs_read_alike(redis_client: redis.Redis) -> None:
    check_agree(redis_client, CRAFTED)


@settings(deadline=None, max_examples=300,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(st.lists(SPECS, min_size=1, max_size=20))
def test_any_spec_reads_alike(redis_client: redis.Redis, specs: list[str]) -> None:
    check_agree(redis_client, specs)


def test_lease_too_long_names_no_slot() -> None:
    """The release ignores a concurrency token whose lease is too long: no slot is named."""
    headers: dict[str, Any] = {}
    mark_slot(headers, "q", gate_field(f"c3/{MOST_LEASE_MS + 1}", "t"))
    assert headers == {}
    mark_slot(headers, "q", gate_field(f"c3/{MOST_LEASE_MS}", "t"))
    assert headers == {SLOT_HEADER: ["q", "t"]}
