-- prelude.lua for one queue shard, as a function: schedule_many.lua calls
-- `schedule_shard(KEYS, ARGV, each)` per shard, and `each(store_message)` stores the shard's
-- messages with the very code a single publish uses.
local function schedule_shard(KEYS, ARGV, each)
--! include prelude.lua
return each(store_message)
end
