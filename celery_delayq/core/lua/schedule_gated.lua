--! include prelude.lua
--! include helpers.lua
--! include gates.lua
-- Store one flow-controlled message (its record has a gate, layout/gates.py), after
-- prelude.lua, helpers.lua and gates.lua. One already due goes straight into its bucket
-- (gates.lua's enter_gate, as a mover's move would put it there), so no mover spends its
-- calls entering it; one due later, or whose bucket's keys are crafted, is kept in the
-- schedule as schedule.lua keeps any message, and a move enters it once due. One sent
-- without an ETA is due now by this server's clock: a producer whose clock runs ahead
-- wrote a due time after it, which is taken back to now (in the record too).
-- Unlimited messages never come here (schedule.lua): they pay nothing for this.
--
-- KEYS[1..5] as schedule.lua's (KEYS[5], the queue registry, left out on a Redis Cluster)
-- KEYS[n]  P:{Q}:fc:ready  zset  flow control's ready buckets (gates.lua), the last key
-- ARGV[3..7] as schedule.lua's
-- ARGV[8]  1: sent without an ETA (due now, whatever ARGV[4] says), else 0
-- Returns  1 when the movers were woken (the message became the earliest of its queue, or
--          its bucket became ready with it), else 0.

local registry = #KEYS == 6 and KEYS[5] or nil
local key, due, record = ARGV[3], ARGV[4], ARGV[5]
local now_us = server_us()
local now = math.floor(now_us / 1000)  -- ms, as server_now reads it
local record_due, _, _, _, _, gate = parse(record)
local spec, bucket = gate_parts(gate)
if ARGV[8] == '1' and record_due and tonumber(due) > now then
  due = string.format('%d', now)
  record = with_due(record, record_due, due)
end
-- due by the server's clock, which the releases judge by too: a release drops a message
-- due after the time it judges by as rescheduled (gates.lua's release_gates)
if not spec or tonumber(due) > now or not gate_usable(bucket) then
  local _, earliest = store_message(key, due, record)
  return announce(earliest, due, registry, ARGV[6], ARGV[7])
end
key = keep_record(key, record)
local ready_at = enter_gate(key, spec, bucket, now_us, now)
if not ready_at then  -- its waiting list holds another type (crafted): as schedule.lua
  return announce(add_entry(key, due), due, registry, ARGV[6], ARGV[7])
end
count_gated()
-- a bucket that waits from now on: listed, and the movers woken for its release (ms),
-- which may be sooner than they know (none while the bucket is paused)
local waits = ready_at ~= true
local release = nil
if waits and ready_at < math.huge then release = string.format('%d', math.ceil(ready_at / 1000)) end
return announce(waits, release, registry, ARGV[6], ARGV[7])
