--! include prelude.lua
--! include helpers.lua
--! include gates.lua
-- Store one flow-controlled message (its record has a gate, layout/gates.py), after
-- prelude.lua, helpers.lua and gates.lua: one already due, or sent without an ETA, goes
-- straight into its bucket (gates.lua's publish_gated). Unlimited messages never come
-- here (schedule.lua): they pay nothing for this.
--
-- KEYS[1..5] as schedule.lua's (KEYS[5], the queue registry, left out on a Redis Cluster)
-- KEYS[n]  P:{Q}:fc:ready  zset  flow control's ready buckets (gates.lua), the last key
-- ARGV[3..7] as schedule.lua's
-- ARGV[8]  1: sent without an ETA (due now, whatever ARGV[4] says), else 0
-- Returns  1 when the movers were woken (the message became the earliest of its queue, or
--          its bucket became ready with it), else 0.

local registry = #KEYS == 6 and KEYS[5] or nil
local wake, at = publish_gated(ARGV[3], ARGV[4], ARGV[5], ARGV[8] == '1', server_us())
count_gated()
return announce(wake, at, registry, ARGV[6], ARGV[7])
