-- Give one pending message a new due time and record, only if it is unchanged since
-- the caller read it (compare-and-set, so a concurrent move or cancel wins cleanly).
--
-- KEYS[1]  P:{Q}:due     zset  message id -> due time (ms)
-- KEYS[2]  P:{Q}:msg     hash  message id -> record
-- ARGV[1]  message id
-- ARGV[2]  the record as the caller read it
-- ARGV[3]  the new record
-- ARGV[4]  the new due time, integer milliseconds since the epoch
-- ARGV[5]  wake-up pubsub channel
-- Returns  1 when replaced, 0 when the message was moved, cancelled or changed meanwhile.

local message_id = ARGV[1]
if redis.call('HGET', KEYS[2], message_id) ~= ARGV[2] then return 0 end
if redis.call('ZSCORE', KEYS[1], message_id) == false then return 0 end
redis.call('HSET', KEYS[2], message_id, ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[4], message_id)
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == message_id then redis.call('PUBLISH', ARGV[5], ARGV[4]) end
return 1
