-- name.lua: move the entry consume.lua recorded under the consumer's provisional tag (a big
-- message it could not read within its budget) to the delivery tag the consumer read in
-- the message, in one step: the message is recorded all along. The entry itself is kept:
-- consume.lua wrote it as kombu's, naming the queue the message came from.
--
-- KEYS[1]   kombu's ``unacked`` hash
-- KEYS[2]   kombu's ``unacked_index`` sorted set
-- ARGV[1]   the provisional tag
-- ARGV[2]   the message's delivery tag
-- ARGV[3]   the consumer's clock: the entry's score (it was taken a moment ago)
--
-- Returns 1, or 0 when there is no entry under the provisional tag any more (a restore
-- put the message back in its queue): then nothing is written.

local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[2], entry)
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
return 1
