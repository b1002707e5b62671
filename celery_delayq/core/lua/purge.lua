-- Delete every pending message of one queue at once, and with it the messages of the
-- queue's kombu lists named in KEYS[6..] (kombu's own purge); counters stay.
-- After prelude.lua.
--
-- KEYS[5]   P:queues  set  the queue is forgotten by the movers
-- KEYS[6..] kombu lists of the queue to empty in the same call (none: the store only)
-- ARGV[3]   queue name
-- Returns   how many messages there were, in the store and in those lists

local count = redis.call('HLEN', MSG)
for i = 6, #KEYS do count = count + redis.call('LLEN', KEYS[i]) end  -- reads first
for _, page in ipairs(redis.call('ZRANGE', PAGES, 0, -1)) do
  redis.call('UNLINK', PAGE_PREFIX .. page)
end
redis.call('UNLINK', MSG, PAGES, DUP)
for i = 6, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('SREM', KEYS[5], ARGV[3])
return count
