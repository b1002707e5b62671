-- Store a chunk of delayed messages in one atomic call: all of them or none
-- (DelayedStore.schedule_chunk), after schedule_shard.lua (schedule_many.lua) or, for a
-- chunk holding flow-controlled messages, schedule_shard_gated.lua
-- (schedule_many_gated.lua). Either defines `schedule_shard(KEYS, ARGV, each)`, which
-- runs the shared code for one queue shard and calls `each`: each message is kept by the
-- code a single publish uses (schedule.lua's store_message; schedule_gated.lua's
-- publish_gated, which puts a due flow-controlled message in its bucket); the counter, and
-- the registry and wake-up when the shard got a new earliest message or a bucket ready
-- with one, once per shard. `each` returns how many ARGV its group took.
--
-- The chunk comes in groups, one per queue shard (on a Redis Cluster, one group per call):
-- KEYS[(g-1)*k+1 ..]  group g's keys, as schedule.lua takes them (k of them), and then
--                     for schedule_many_gated.lua the shard's P:{Q}:fc:ready
-- ARGV[1]  g, how many groups
-- ARGV[2]  k, keys per group
-- then per group: page key prefix, page size limit, queue name, wake-up channel, n, and
-- n triples (message key, due time, record) as schedule.lua's ARGV[3], [4], [5], and
-- for schedule_many_gated.lua only one string of n flags, the i-th for the i-th
-- message: "1" sent without an ETA (due now by the store's clock, whatever its due time
-- says: schedule_gated.lua's ARGV[8]), else "0"
-- Returns  how many messages were stored

local groups, per_group = tonumber(ARGV[1]), tonumber(ARGV[2])
local at, stored = 3, 0
for group = 0, groups - 1 do
  local keys = {}
  for i = 1, per_group do keys[i] = KEYS[group * per_group + i] end
  local queue, channel = ARGV[at + 2], ARGV[at + 3]
  local n = tonumber(ARGV[at + 4])
  local first = at + 5  -- the group's first message key
  at = at + schedule_shard(keys, {ARGV[at], ARGV[at + 1]}, function(store_message,
                                                                    publish_gated,
                                                                    count_gated, server_us)
    -- the queue registry, when in the keys (not on a Redis Cluster): KEYS[5], before the
    -- ready buckets of a chunk with flow control
    local registry = keys[publish_gated and 6 or 5] and keys[5]
    local now_us = publish_gated and server_us()
    local flags = publish_gated and ARGV[first + 3 * n]  -- after the triples
    local listed, wake = false, nil  -- the earliest time (ms) to wake the movers for
    for m = 0, n - 1 do
      local i = first + 3 * m
      local earliest, due
      if publish_gated then
        local no_eta = string.byte(flags, m + 1) == 49  -- "1"
        earliest, due = publish_gated(ARGV[i], ARGV[i + 1], ARGV[i + 2], no_eta, now_us)
      else
        local _, earliest_of_queue = store_message(ARGV[i], ARGV[i + 1], ARGV[i + 2])
        earliest, due = earliest_of_queue, ARGV[i + 1]
      end
      if earliest then
        listed = true
        if due and (not wake or tonumber(due) < tonumber(wake)) then wake = due end
      end
    end
    redis.call('HINCRBY', keys[4], 'scheduled', n)
    if count_gated then count_gated() end
    if listed and registry then redis.call('SADD', registry, queue) end
    if wake then redis.call('PUBLISH', channel, wake) end
    return 5 + 3 * n + (flags and 1 or 0)  -- the group's ARGV, for the next group's
  end)
  stored = stored + n
end
return stored
