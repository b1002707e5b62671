-- Delete every pending message of one queue shard at once, and with it the messages of
-- the queue's kombu lists named after the registry (kombu's own purge); counters stay.
-- After prelude.lua.
--
-- KEYS[5]   P:queues  set  the queue is forgotten by the movers (only when ARGV[4] is 1)
-- KEYS[..]  kombu lists of the queue to empty in the same call (none: the store only)
-- ARGV[3]   queue name
-- ARGV[4]   1 when KEYS[5] is the registry, 0 when the registry is not passed (a sharded
--           queue, or a Redis Cluster, where it lives in another slot)
-- Returns   how many messages there were, in the store and in those lists

local forget = ARGV[4] == '1'
local first_list = forget and 6 or 5
local count = redis.call('HLEN', MSG)
for i = first_list, #KEYS do count = count + redis.call('LLEN', KEYS[i]) end  -- reads first
for _, page in ipairs(redis.call('ZRANGE', PAGES, 0, -1)) do
  redis.call('UNLINK', PAGE_PREFIX .. page)
end
redis.call('UNLINK', MSG, PAGES, DUP)
for i = first_list, #KEYS do redis.call('DEL', KEYS[i]) end
if forget then redis.call('SREM', KEYS[5], ARGV[3]) end
return count
