"""A thin harness around lua/gates.lua for the flow-control tests: the real enter and
release code, run by a real Redis at a time the test chooses (the move reads the server's
clock; the rule is checked at any instant, not only at those a test can sleep to)."""

from __future__ import annotations

import redis

from celery_delayq.core.layout.gates import GateSpec, Rate, bucket_of, gate_field
from celery_delayq.core.layout.keys import KeySpace, QueueKeys
from celery_delayq.core.layout.record import Record
from celery_delayq.core.lua import HELPERS, PRELUDE, read_source

#: KEYS and ARGV[1..2] as move_due.lua; ARGV[3] now (us), ARGV[4] most messages looked at,
#: ARGV[5] release log size, ARGV[6..] message keys (records in MSG) that fall due now and
#: enter their gates. Returns the keys released, in order.
HARNESS = (
    PRELUDE
    + HELPERS
    + read_source("gates")
    + """
local now, most, log_size = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now_ms = math.floor(now / 1000)
for i = 6, #ARGV do
  local _, _, _, _, _, gate = parse(redis.call('HGET', MSG, ARGV[i]))
  local spec, bucket = gate_parts(gate)
  enter_gate(ARGV[i], spec, bucket, now, now_ms)
end
local out = {n = 0, key = {}, record = {}, due = {}, destination = {}, start = {},
             expires = {}, bad_key = {}, bad_record = {}, bad_reason = {}}
release_gates(now, now_ms, now_ms, most, math.huge, log_size, out, function() return true end)
return out.key
"""
)


def gate_of(rates: tuple[str, ...], task: str = "t", key: str | None = None) -> bytes:
    """The gate a publisher writes for a task limited by ``rates``."""
    spec = GateSpec(tuple(Rate.parse(rate) for rate in rates)).encode()
    return gate_field(spec, bucket_of(task, key))


class Gates:
    """One queue's gates on a real Redis, driven at chosen instants (us)."""

    def __init__(self, client: redis.Redis, queue: str = "q") -> None:
        self.client = client
        self.keys: QueueKeys = KeySpace().for_queue(queue)
        self.script = client.register_script(HARNESS)

    def add(self, key: bytes, gate: bytes) -> None:
        """A message's record (due long ago) in MSG, not yet in its bucket."""
        record = Record(1, "elsewhere", b"{}", gate=gate).encode(self.keys.own_list)
        self.client.hset(self.keys.messages, key, record)

    def call(self, now_us: int, entering: list[bytes], most: int = 100) -> list[bytes]:
        """Enter these messages' gates and release what the limits allow, at ``now_us``."""
        keys = [*self.keys.move_keys()]
        args = [*self.keys.page_args(), now_us, most, 0, *entering]
        return list(self.script(keys=keys, args=args))

    def ready(self) -> list[tuple[bytes, float]]:
        return self.client.zrange(f"{self.keys.gates}ready", 0, -1, withscores=True)
