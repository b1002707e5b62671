-- Rebuild one task id's index entry from the records that exist (`doctor --repair`).
-- Ids already indexed and the caller's candidates are kept only if their record exists,
-- so an id scheduled concurrently is never dropped.
--
-- KEYS[1]  P:{Q}:msg     hash  message id -> record
-- KEYS[2]  P:{Q}:ids     hash  task id -> space-separated message ids
-- ARGV[1]  Celery task id
-- ARGV[2..] message ids whose record names this task
-- Returns  the number of message ids now indexed for the task.

local seen, valid = {}, {}
local function keep(message_id)
  if not seen[message_id] and redis.call('HEXISTS', KEYS[1], message_id) == 1 then
    valid[#valid + 1] = message_id
  end
  seen[message_id] = true
end
for message_id in string.gmatch(redis.call('HGET', KEYS[2], ARGV[1]) or '', '%S+') do
  keep(message_id)
end
for i = 2, #ARGV do keep(ARGV[i]) end
if #valid == 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[2], ARGV[1], table.concat(valid, ' '))
end
return #valid
