--! include schedule_function.lua
--! include schedule_all.lua
-- Move one orphaned vanilla ETA message from kombu's `unacked` hash into the delayed store.
--
-- KEYS[1]   unacked         hash  delivery tag -> JSON [message, exchange, routing key]
-- KEYS[2]   unacked_index   zset  delivery tag -> time it was fetched
-- KEYS[3..] the store keys of each schedule call (see schedule_all.lua)
-- ARGV[1]   delivery tag
-- ARGV[2]   the hash entry exactly as it was read; a different value means kombu
--           restored and redelivered it meanwhile, so it is left alone
-- ARGV[3..] the schedule calls (see schedule_all.lua)
-- Returns   1 when the message was moved; 0 when the entry was gone or changed, and then
--           nothing is written.

if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
schedule_all(2, 2)
return 1
