--! include prelude.lua
--! include helpers.lua
--! include handover.lua
-- Schedule dead letters again, due now (after prelude.lua and handover.lua): an
-- operator fixed what made them fail (a missing binding, say). Their tries start over.
--
-- ARGV[3..] message keys of dead letters
-- Returns   how many were scheduled again. A key with no dead letter, or whose message
--           key is taken by a newer pending message of the same task, is left as it is;
--           so is a dead letter whose record a move cannot read (parse): scheduled
--           again, it would only be dead-lettered again by the next move.

local now = server_now()
local resent = 0
for i = 3, #ARGV do
  local key = ARGV[i]
  local record = redis.call('HGET', DEAD, key)
  local due = record and parse(record)
  if due and redis.call('HEXISTS', MSG, key) == 0 then
    record = with_due(record, due, now)
    redis.call('HSET', MSG, key, record)
    add_entry(key, now)
    hold_key_again(record, key, now)
    redis.call('HDEL', DEAD, key)
    redis.call('HDEL', DEAD_WHY, key)
    redis.call('HDEL', TRIES, key)
    resent = resent + 1
  end
end
return resent
