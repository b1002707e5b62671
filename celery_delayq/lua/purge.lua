-- Delete every pending message of one queue at once (after prelude.lua); counters stay.
--
-- KEYS[5]  P:queues  set  the queue is forgotten by the movers
-- ARGV[3]  queue name
-- Returns  how many messages there were

local count = redis.call('HLEN', MSG)
for _, page in ipairs(redis.call('ZRANGE', PAGES, 0, -1)) do
  redis.call('UNLINK', PAGE_PREFIX .. page)
end
redis.call('UNLINK', MSG, PAGES, DUP)
redis.call('SREM', KEYS[5], ARGV[3])
return count
