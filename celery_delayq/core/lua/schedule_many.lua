-- Store a chunk of delayed messages in one atomic call: all of them or none
-- (DelayedStore.schedule_chunk). Assembled by scripts.py after `schedule_shard(KEYS, ARGV,
-- each)`, which runs prelude.lua for one queue shard, then calls `each` with the schedule
-- script as a function of its ARGV: each message is stored by the very code, and with the
-- arguments, of a single publish.
--
-- The chunk comes in groups, one per queue shard (on a Redis Cluster, one group per call):
-- KEYS[(g-1)*k+1 ..]  group g's keys, as schedule.lua takes them (k of them)
-- ARGV[1]  g, how many groups
-- ARGV[2]  k, keys per group
-- then per group: page key prefix, page size limit, queue name, wake-up channel, n, and
-- n triples (message key, due time, record tail) as schedule.lua's ARGV[3], [4], [5]
-- Returns  how many messages were stored

local groups, per_group = tonumber(ARGV[1]), tonumber(ARGV[2])
local at, stored = 3, 0
for group = 0, groups - 1 do
  local keys = {}
  for i = 1, per_group do keys[i] = KEYS[group * per_group + i] end
  local prefix, page_max, queue, channel = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local n = tonumber(ARGV[at + 4])
  at = at + 5
  schedule_shard(keys, {prefix, page_max}, function(schedule)
    for _ = 1, n do
      schedule({prefix, page_max, ARGV[at], ARGV[at + 1], ARGV[at + 2], queue, channel})
      at = at + 3
    end
  end)
  stored = stored + n
end
return stored
