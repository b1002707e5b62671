-- consume.lua: take the next message off the first non-empty list, and record it as kombu's
-- own unacknowledged entry, in one step: there is no moment when the message is in neither
-- place, so a consumer killed at any point loses nothing (kombu's BRPOP takes it first and
-- records it in a second round trip). Stock kombu workers restore these entries as their own.
--
-- Nothing after the RPOP can fail the script: reading the message and building its entry
-- run in one pcall, and what remains are writes of ready strings. A message that cannot be
-- read or recorded is handed back whole (RPUSH: the end it was popped from, so its place
-- in the queue is kept); the reply names it and the reason, and the consumer moves it to
-- the dead letters (consume.py). Popping first keeps the common path at one Redis
-- command per message taken (an LINDEX before it would add one).
--
-- KEYS[1]   kombu's ``unacked`` hash (global_keyprefix applied, like every key here)
-- KEYS[2]   kombu's ``unacked_index`` sorted set
-- KEYS[3..] the lists to take from, in kombu's order (queue rotation, then priority); a
--           consumer's landing list (consume.py) is taken from the same way
-- ARGV[1]   the consumer's clock (seconds since the epoch): an entry's score, as kombu scores
--           it (restores and lease renewals compare with the workers' clocks too)
-- ARGV[i+1] for the list KEYS[i + 2]: its queue's name, to record what is taken from it, or
--           "" to take it unrecorded (a no_ack consumer)
--
-- Returns nil when all the lists are empty, else {i, message, tag, reason}, i counting the
-- lists from 1:
--   reason ""  the message was taken; tag is the delivery tag it is recorded under ("" when
--              taken unrecorded). The entry is kombu's: [message, exchange, routing key]
--              under the message's delivery tag, scored with the time it was taken. When the
--              delivery info does not name the exchange and routing key as strings (kombu
--              always does), the entry names the default exchange ("") and the queue, so a
--              restore puts the message back in the queue it was taken from.
--   reason     why the message cannot be taken: it is not kombu's JSON envelope, or has
--              parts that would make kombu's restore of it fail (and drop it). It is back
--              in its list, as the last element, and tag is "".

local INFINITY = 1 / 0

-- A number kombu's restore cannot turn into an int (OverflowError).
local function infinite(value)
  return type(value) == 'number' and (value == INFINITY or value == -INFINITY)
end

-- Why a decoded envelope cannot be taken: kombu could not read it, or a restore (ours or
-- stock kombu's) could not put it back. nil when it can.
local function unreadable(payload)
  if type(payload) ~= 'table' then
    return 'not a JSON object'
  end
  local properties = payload['properties']
  if type(properties) ~= 'table' then
    return 'no "properties" object'
  end
  local tag = properties['delivery_tag']
  -- printable ASCII: the tag is a hash field here, and a str in the consumer
  if type(tag) ~= 'string' or tag == '' or string.find(tag, '[^\32-\126]') then
    return 'no "delivery_tag" (a string of printable ASCII)'
  end
  local headers, info = payload['headers'], properties['delivery_info']
  if (headers ~= nil and type(headers) ~= 'table') or (info ~= nil and type(info) ~= 'table')
      or infinite(properties['priority']) then
    return 'its "headers", "delivery_info" or "priority" would make its restore fail'
  end
  return nil
end

-- The message's envelope, or nil and why it cannot be taken.
local function read(message)
  local ok, payload = pcall(cjson.decode, message)
  if not ok then
    return nil, 'not JSON'
  end
  local reason = unreadable(payload)
  if reason then
    return nil, reason
  end
  return payload
end

-- kombu's unacked entry of a readable message.
local function entry_of(message, properties, queue)
  local info = properties['delivery_info'] or {}
  local exchange, routing_key = '', queue
  if type(info['exchange']) == 'string' and type(info['routing_key']) == 'string' then
    exchange, routing_key = info['exchange'], info['routing_key']
  end
  local names = cjson.encode(exchange) .. ', ' .. cjson.encode(routing_key)
  return '[' .. message .. ', ' .. names .. ']'
end

-- The delivery tag and entry ("" for a consumer that does not record) of a message, or
-- nil and why it cannot be taken.
local function take(message, queue)
  local payload, reason = read(message)
  if not payload then
    return nil, reason
  end
  local properties = payload['properties']
  return properties['delivery_tag'], queue ~= '' and entry_of(message, properties, queue) or ''
end

for i = 3, #KEYS do
  local message = redis.call('RPOP', KEYS[i])
  if message then
    local ok, tag, entry = pcall(take, message, ARGV[i - 1])
    if not ok or not tag then  -- an error (tag holds it) or a reason (entry holds it)
      redis.call('RPUSH', KEYS[i], message)
      return {i - 2, message, '', ok and entry or ('cannot be read: ' .. tostring(tag))}
    end
    if entry == '' then
      return {i - 2, message, '', ''}
    end
    redis.call('HSET', KEYS[1], tag, entry)
    redis.call('ZADD', KEYS[2], ARGV[1], tag)
    return {i - 2, message, tag, ''}
  end
end
return nil
