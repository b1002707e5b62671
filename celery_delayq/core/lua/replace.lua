--! include prelude.lua
--! include helpers.lua
-- Give one pending message a new due time and record, only if it is unchanged since the
-- caller read it (compare-and-set, so a concurrent move or cancel wins cleanly).
-- After prelude.lua.
--
-- ARGV[3]  message key
-- ARGV[4]  the record as the caller read it
-- ARGV[5]  the new record (its due time is ARGV[6])
-- ARGV[6]  the new due time, integer milliseconds since the epoch
-- ARGV[7]  wake-up pubsub channel
-- Returns  1 when replaced, 0 when the message was moved, cancelled or changed meanwhile.

local key = ARGV[3]
local record = redis.call('HGET', MSG, key)
if record ~= ARGV[4] then return 0 end
local due = parse(record)
if not due or remove_entry(key, due) == 0 then return 0 end
add_entry(key, ARGV[6])
redis.call('HSET', MSG, key, ARGV[5])
if head() == key then redis.call('PUBLISH', ARGV[7], ARGV[6]) end
return 1
