--! include prelude.lua
--! include helpers.lua
-- Delete every pending message of one queue shard at once, and with it the messages of
-- the queue's kombu lists named after the registry (kombu's own purge); counters stay.
-- The periodic occurrences written ahead (write_ahead.lua) stay: their entries' marks say
-- they are written, so no beat would write them again, and the entries would stop.
-- After prelude.lua and helpers.lua.
--
-- KEYS[5]   P:{Q}:periodic:ahead  hash  entry name -> the message keys written ahead
-- KEYS[6]   P:queues  set  the queue is forgotten by the movers (only when ARGV[4] is 1,
--           and nothing stays)
-- KEYS[..]  kombu lists of the queue to empty in the same call (none: the store only)
-- ARGV[3]   queue name
-- ARGV[4]   1 when KEYS[6] is the registry, 0 when the registry is not passed (a sharded
--           queue, or a Redis Cluster, where it lives in another slot)
-- Returns   how many messages were deleted, in the store and in those lists

local forget = ARGV[4] == '1'
local first_list = forget and 7 or 6

-- The occurrences written ahead that are still pending, read before anything goes.
local kept, seen = {}, {}
local ahead = redis.call('HGETALL', KEYS[5])
for i = 2, #ahead, 2 do
  local listed, pos = ahead[i], 1
  while pos <= #listed do
    local key, after = counted(listed, pos)
    if not key then break end
    pos = after
    local record = not seen[key] and redis.call('HGET', MSG, key)
    local due = record and parse(record)
    if due then kept[#kept + 1] = {key, due, record} end
    seen[key] = true
  end
end

local count = redis.call('HLEN', MSG) - #kept
for i = first_list, #KEYS do count = count + redis.call('LLEN', KEYS[i]) end  -- reads first
for _, page in ipairs(redis.call('ZRANGE', PAGES, 0, -1)) do
  redis.call('UNLINK', PAGE_PREFIX .. page)
end
redis.call('UNLINK', MSG, PAGES, DUP, BY_TASK)
for i = first_list, #KEYS do redis.call('DEL', KEYS[i]) end
for _, message in ipairs(kept) do
  redis.call('HSET', MSG, message[1], message[3])
  add_entry(message[1], message[2])
end
if forget and #kept == 0 then redis.call('SREM', KEYS[6], ARGV[3]) end
return count
