-- Store one delayed message until it is due.
--
-- KEYS[1]  P:{Q}:due     zset  message id -> due time (ms)
-- KEYS[2]  P:{Q}:msg     hash  message id -> record
-- KEYS[3]  P:{Q}:ids     hash  task id -> space-separated message ids
-- KEYS[4]  P:{Q}:stats   hash  counters (scheduled is incremented)
-- KEYS[5]  P:queues      set   queue names the movers visit
-- ARGV[1]  message id (kombu delivery tag)
-- ARGV[2]  due time, integer milliseconds since the epoch
-- ARGV[3]  record: "<len>:<destination list><len>:<task id><payload bytes>"
-- ARGV[4]  Celery task id, or "" when the message has none
-- ARGV[5]  queue name (member of KEYS[5])
-- ARGV[6]  wake-up pubsub channel
-- Returns  1 when the message became the earliest of its queue (movers were woken), else 0.

local message_id, due, task_id = ARGV[1], ARGV[2], ARGV[4]

local is_new = redis.call('HSET', KEYS[2], message_id, ARGV[3]) == 1
redis.call('ZADD', KEYS[1], due, message_id)
if is_new and task_id ~= '' then
  local ids = redis.call('HGET', KEYS[3], task_id)
  redis.call('HSET', KEYS[3], task_id, ids and (ids .. ' ' .. message_id) or message_id)
end
redis.call('SADD', KEYS[5], ARGV[5])
redis.call('HINCRBY', KEYS[4], 'scheduled', 1)

local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == message_id then
  redis.call('PUBLISH', ARGV[6], due)
  return 1
end
return 0
