-- consume.lua: take the next message off the first non-empty list, and record it as kombu's
-- own unacknowledged entry, in one step: there is no moment when the message is in neither
-- place, so a consumer killed at any point loses nothing (kombu's BRPOP takes it first and
-- records it in a second round trip). Stock kombu workers restore these entries as their own.
--
-- KEYS[1]   kombu's ``unacked`` hash (global_keyprefix applied, like every key here)
-- KEYS[2]   kombu's ``unacked_index`` sorted set
-- KEYS[3..] the lists to take from, in kombu's order (queue rotation, then priority); a
--           consumer's landing list (redis_consume.py) is taken from the same way
-- ARGV[1]   the consumer's clock (seconds since the epoch): an entry's score, as kombu scores
--           it (restores and lease renewals compare with the workers' clocks too)
-- ARGV[i+1] "1" to record the message taken from KEYS[i + 2], "0" to take it unrecorded
--           (a no_ack consumer)
--
-- Returns {i, message}, i counting the lists from 1, or nil when all of them are empty. The
-- entry is kombu's: [message, exchange, routing key] under the message's delivery tag, scored
-- with the time it was taken. A message that is not kombu JSON is taken unrecorded, as kombu
-- takes it (the consumer then reports it); it cannot be restored in any case.

local function entry_of(message)
  local ok, payload = pcall(cjson.decode, message)
  if not ok or type(payload) ~= 'table' or type(payload['properties']) ~= 'table' then
    return nil
  end
  local properties = payload['properties']
  local tag = properties['delivery_tag']
  local info = properties['delivery_info']
  if type(tag) ~= 'string' or type(info) ~= 'table' then
    return nil
  end
  local exchange = info['exchange'] or ''
  local routing_key = info['routing_key'] or ''
  return tag, '[' .. message .. ', ' .. cjson.encode(exchange) .. ', '
    .. cjson.encode(routing_key) .. ']'
end

for i = 3, #KEYS do
  local message = redis.call('RPOP', KEYS[i])
  if message then
    if ARGV[i - 1] == '1' then
      local tag, entry = entry_of(message)
      if tag then
        redis.call('HSET', KEYS[1], tag, entry)
        redis.call('ZADD', KEYS[2], ARGV[1], tag)
      end
    end
    return {i - 2, message}
  end
end
return nil
