--! include prelude.lua
--! include helpers.lua
-- Give one pending message a new due time and record, only if it is unchanged since the
-- caller read it (compare-and-set, so a concurrent move or cancel wins cleanly).
-- After prelude.lua.
--
-- KEYS[5]  P:{Q}:inflight  zset  claimed message keys (handover.lua)
-- ARGV[3]  message key
-- ARGV[4]  the record as the caller read it
-- ARGV[5]  the new record (its due time is ARGV[6])
-- ARGV[6]  the new due time, integer milliseconds since the epoch
-- ARGV[7]  wake-up pubsub channel
-- Returns  1 when replaced, 0 when the message was moved, cancelled or changed meanwhile.

local key = ARGV[3]
local record = redis.call('HGET', MSG, key)
if record ~= ARGV[4] then return 0 end
local due, _, _, _, _, gate = parse(record)
if not due then return 0 end
if remove_entry(key, due) == 0 then
  -- Out of the schedule: claimed by a mover, and on its way; or, with a gate, due and
  -- waiting in its bucket (gates.lua). That one waits in the schedule again, and its
  -- place in the bucket is dropped if reached before the new time.
  if not gate or redis.call('ZSCORE', KEYS[5], key) then return 0 end
end
add_entry(key, ARGV[6])
redis.call('HSET', MSG, key, ARGV[5])
if head() == key then redis.call('PUBLISH', ARGV[7], ARGV[6]) end
return 1
