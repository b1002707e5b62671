--! include schedule_shard.lua
-- Store a chunk of delayed messages in one atomic call: all of them or none
-- (DelayedStore.schedule_chunk). schedule_shard.lua defines `schedule_shard(KEYS, ARGV,
-- each)`, which runs prelude.lua for one queue shard and calls `each(store_message)`: each
-- message is kept by the code a single publish uses (schedule.lua); the counter, and the
-- registry and wake-up when the shard got a new earliest message, once per shard.
--
-- The chunk comes in groups, one per queue shard (on a Redis Cluster, one group per call):
-- KEYS[(g-1)*k+1 ..]  group g's keys, as schedule.lua takes them (k of them)
-- ARGV[1]  g, how many groups
-- ARGV[2]  k, keys per group
-- then per group: page key prefix, page size limit, queue name, wake-up channel, n, and
-- n triples (message key, due time, record) as schedule.lua's ARGV[3], [4], [5]
-- Returns  how many messages were stored

local groups, per_group = tonumber(ARGV[1]), tonumber(ARGV[2])
local at, stored = 3, 0
for group = 0, groups - 1 do
  local keys = {}
  for i = 1, per_group do keys[i] = KEYS[group * per_group + i] end
  local queue, channel = ARGV[at + 2], ARGV[at + 3]
  local n = tonumber(ARGV[at + 4])
  schedule_shard(keys, {ARGV[at], ARGV[at + 1]}, function(store_message)
    local earliest_due = nil  -- each new earliest is below the one before it
    for i = at + 5, at + 2 + 3 * n, 3 do
      local _, earliest = store_message(ARGV[i], ARGV[i + 1], ARGV[i + 2])
      if earliest then earliest_due = ARGV[i + 1] end
    end
    redis.call('HINCRBY', keys[4], 'scheduled', n)
    if earliest_due then
      if keys[5] then redis.call('SADD', keys[5], queue) end
      redis.call('PUBLISH', channel, earliest_due)
    end
  end)
  at = at + 5 + 3 * n
  stored = stored + n
end
return stored
