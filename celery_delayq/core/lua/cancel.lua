-- Remove every pending message of one Celery task (after prelude.lua).
--
-- ARGV[3]  task key
-- Returns  how many messages were removed (0: already delivered, or never delayed here)

local removed = 0
for _, key in ipairs(message_keys(ARGV[3])) do
  local record = redis.call('HGET', MSG, key)
  if record then
    remove_message(key, record)
    removed = removed + 1
  end
end
redis.call('HDEL', DUP, ARGV[3])
if removed > 0 then redis.call('HINCRBY', STATS, 'cancelled', removed) end
return removed
