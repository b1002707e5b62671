-- Remove every pending delayed message of one Celery task id.
--
-- KEYS[1]  P:{Q}:due     zset  message id -> due time (ms)
-- KEYS[2]  P:{Q}:msg     hash  message id -> record
-- KEYS[3]  P:{Q}:ids     hash  task id -> space-separated message ids
-- KEYS[4]  P:{Q}:stats   hash  counters (cancelled is incremented)
-- ARGV[1]  Celery task id
-- Returns  how many messages were removed (0: already delivered, or never delayed here)

local ids = redis.call('HGET', KEYS[3], ARGV[1])
if not ids then return 0 end
local removed = 0
for message_id in string.gmatch(ids, '%S+') do
  removed = removed + redis.call('ZREM', KEYS[1], message_id)
  redis.call('HDEL', KEYS[2], message_id)
end
redis.call('HDEL', KEYS[3], ARGV[1])
if removed > 0 then redis.call('HINCRBY', KEYS[4], 'cancelled', removed) end
return removed
