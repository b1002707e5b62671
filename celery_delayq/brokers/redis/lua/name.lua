-- name.lua: give the entry consume.lua recorded under the consumer's provisional tag (a big
-- message it could not read in its time budget) the delivery tag the consumer read in the
-- message, and kombu's entry of it, in one step: the message is recorded all along.
--
-- KEYS[1]   kombu's ``unacked`` hash
-- KEYS[2]   kombu's ``unacked_index`` sorted set
-- ARGV[1]   the provisional tag
-- ARGV[2]   the message's delivery tag
-- ARGV[3]   kombu's entry of the message: [message, exchange, routing key]
-- ARGV[4]   the consumer's clock: the entry's score (it was taken a moment ago)
--
-- Returns 1, or 0 when there is no entry under the provisional tag any more (a restore
-- put the message back in its queue): then nothing is written.

if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
return 1
