--! include prelude.lua
--! include helpers.lua
--! include handover.lua
-- Give claimed messages back to the schedule (after prelude.lua and handover.lua): the
-- broker refused them, or the publish failed before they were confirmed. Claims that
-- are no longer ours are left alone. A flow-controlled message comes back ungated
-- (handover.lua): its release counted it already.
--
-- ARGV[3]  owner of the claims
-- ARGV[4]  1: the messages were refused (count a try, retry after a back-off, dead-letter
--          at the last try); 0: the broker was unreachable (due again at once, no try)
-- ARGV[5]  most tries
-- ARGV[6]  back-off (ms) after the first refusal; it doubles with each further one
-- ARGV[7]  reason, kept with a dead letter
-- ARGV[8..] message keys
-- Returns  {messages given back, messages dead-lettered}

local now = server_now()
local owner, refused, most_tries = ARGV[3], ARGV[4] == '1', tonumber(ARGV[5])
local backoff, reason = tonumber(ARGV[6]), ARGV[7]
local given_back, dead = 0, 0
for i = 8, #ARGV do
  local key = ARGV[i]
  if redis.call('HGET', CLAIMS, key) == owner then
    unclaim(key)
    local record = redis.call('HGET', MSG, key)
    if record then
      if refused then
        local tries = tonumber(redis.call('HGET', TRIES, key) or '0')
        local due = now + backoff * 2 ^ tries
        dead = dead + failed_once(key, string.format('%d', due), most_tries, reason, now)
      else
        record = ungated(key, record)
        add_entry(key, parse(record) or now)
        hold_key_again(record, key, now)
      end
      given_back = given_back + 1
    end
  end
end
return {given_back - dead, dead}
