-- Make one message's schedule entry agree with its record (used by `doctor --repair`).
-- Checked inside the script, so a concurrent move, cancel or schedule cannot be undone.
--
-- KEYS[1]  P:{Q}:due     zset  message id -> due time (ms)
-- KEYS[2]  P:{Q}:msg     hash  message id -> record
-- ARGV[1]  message id
-- ARGV[2]  due time (ms) to use when the record has no schedule entry
-- Returns  1 when an entry was added or removed, else 0.

local has_record = redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1
local scheduled = redis.call('ZSCORE', KEYS[1], ARGV[1])
if has_record and not scheduled then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  return 1
end
if scheduled and not has_record then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
