--! include schedule_function.lua
--! include schedule_all.lua
-- Move one vanilla ETA message from a kombu queue list into the delayed store.
--
-- KEYS[1]   the kombu list holding the message (global_keyprefix applied)
-- KEYS[2..] the store keys of each schedule call (see schedule_all.lua)
-- ARGV[1]   the message exactly as it sits in the list
-- ARGV[2]   where the scan saw it (index from the head); only a hint
-- ARGV[3..] the schedule calls (see schedule_all.lua)
-- Returns   1 when the message was moved; 0 when it was no longer in the list (a worker
--           took it meanwhile), and then nothing is written.

-- LREM compares every element it passes, so it starts from the end nearer the hint.
-- Identical bytes are one message (same delivery tag): which copy goes does not matter.
local direction = 1
if tonumber(ARGV[2]) * 2 > redis.call('LLEN', KEYS[1]) then direction = -1 end

if redis.call('LREM', KEYS[1], direction, ARGV[1]) ~= 1 then
  return 0
end
schedule_all(1, 2)
return 1
