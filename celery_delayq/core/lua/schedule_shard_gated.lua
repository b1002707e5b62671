-- schedule_shard.lua with flow control, for a chunk holding flow-controlled messages
-- (schedule_many_gated.lua): prelude.lua, helpers.lua and gates.lua for one queue shard,
-- as a function; `each(store_message, publish_gated, count_gated, server_us)` stores the
-- shard's messages. The shard's keys end with its ready buckets.
local function schedule_shard(KEYS, ARGV, each)
--! include prelude.lua
--! include helpers.lua
--! include gates.lua
return each(store_message, publish_gated, count_gated, server_us)
end
