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
-- A message of at most FULL_READ_MAX bytes is decoded whole (whatever its shape, that
-- stays under a millisecond). Of a bigger one, only the envelope's "properties" are
-- decoded, never the body: decoding a whole message costs Redis time in proportion to its
-- size, and that of a dense one (many small tokens) many times a plain RPOP of it. The
-- envelope's top-level keys are skimmed instead, jumping over each string value with a
-- plain search for its closing quote, and what the entry needs is decoded from the
-- "properties" value alone, as a full decode would read it (the last of duplicate keys
-- wins, keys are unescaped, as in Python's json). A big message the skim cannot follow
-- within MAX_STEPS steps (not an object, dense or deeply nested values, strings full of
-- escapes, JSON the skim finds broken, properties of FULL_READ_MAX bytes or more) is
-- recorded under the consumer's provisional tag (ARGV[2]) as kombu's entry of the queue
-- it came from, and the consumer reads it and gives the entry the tag it reads (name.lua),
-- or dead-letters it. The skim checks structure, not every token: what it passes and
-- Python's JSON refuses (a broken body) is taken and recorded, then dead-lettered by the
-- consumer, which also refuses a message whose delivery tag Python reads otherwise
-- (consume.py).
--
-- KEYS[1]   kombu's ``unacked`` hash (global_keyprefix applied, like every key here)
-- KEYS[2]   kombu's ``unacked_index`` sorted set
-- KEYS[3..] the lists to take from, in kombu's order (queue rotation, then priority); a
--           consumer's landing list (consume.py) is taken from the same way
-- ARGV[1]   the consumer's clock (seconds since the epoch): an entry's score, as kombu scores
--           it (restores and lease renewals compare with the workers' clocks too)
-- ARGV[2]   a tag of the consumer's own, unique to the call: what a big message the skim
--           cannot follow is recorded under until the consumer has read it
-- ARGV[i+2] for the list KEYS[i + 2]: its queue's name, to record what is taken from it, or
--           "" to take it unrecorded (a no_ack consumer)
--
-- Returns nil when all the lists are empty, else {i, message, tag, reason}, i counting the
-- lists from 1:
--   reason ""  the message was taken; tag is the delivery tag it is recorded under ("" when
--              taken unrecorded). The entry is kombu's: [message, exchange, routing key]
--              under the message's delivery tag, scored with the time it was taken; it names
--              the default exchange ("") and the queue, so a restore puts the message back in
--              the queue it was taken from. A big message the skim cannot follow is recorded
--              under ARGV[2].
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

-- Steps the skim takes at most (a step: a byte outside strings, a string, a backslash
-- before a quote) before it leaves the message to the consumer: well under a millisecond.
local MAX_STEPS = 4096
-- The biggest message decoded whole (bytes); of a bigger one, the properties only.
local FULL_READ_MAX = 16384
local QUOTE, BACKSLASH, COLON, COMMA = 34, 92, 58, 44
local OPENS = {[123] = true, [91] = true}  -- { [
local CLOSES = {[125] = true, [93] = true}  -- } ]
local SPACE = {[32] = true, [9] = true, [10] = true, [13] = true}  -- JSON's whitespace
-- What ends a number, true, false or null (lenient: Python's JSON checks the token).
local ENDS_TOKEN = {[COMMA] = true, [QUOTE] = true, [125] = true, [93] = true, [123] = true,
                    [91] = true, [32] = true, [9] = true, [10] = true, [13] = true}
-- The longest a key can be written and still be one the skim looks for ("\u0070..." x 10).
local LONGEST_KEY = 64

-- The text of the last "properties" value and the first byte of the last "headers" value
-- of a message's top-level object (nil where there is none). Raises an error where the
-- skim cannot follow the message, or its properties are too big to decode in the budget.
local function skim(s)
  local byte, find, sub = string.byte, string.find, string.sub
  local at, steps = 1, MAX_STEPS

  local function step()
    steps = steps - 1
    if steps < 0 then
      error('too many steps')
    end
  end

  -- The byte at the next non-space.
  local function spaces()
    local b = byte(s, at)
    while SPACE[b] do
      step()
      at = at + 1
      b = byte(s, at)
    end
    return b
  end

  -- From a string's opening quote to past its closing one (a quote is closing after an
  -- even run of backslashes): one plain search a quote, at C speed.
  local function skip_string()
    local from = at + 1
    while true do
      step()
      local quote = find(s, '"', from, true)
      if not quote then
        error('unterminated string')
      end
      local before = quote - 1
      while byte(s, before) == BACKSLASH do  -- stops at the opening quote at the latest
        step()
        before = before - 1
      end
      if (quote - 1 - before) % 2 == 0 then
        at = quote + 1
        return
      end
      from = quote + 1
    end
  end

  -- From a value's first byte to past its last.
  local function skip_value()
    local b = byte(s, at)
    if b == QUOTE then
      return skip_string()
    end
    if not OPENS[b] then  -- a number, true, false, null
      local first = at
      while b and not ENDS_TOKEN[b] do
        step()
        at = at + 1
        b = byte(s, at)
      end
      if at == first then
        error('no value')
      end
      return
    end
    local depth = 0
    repeat
      step()
      b = byte(s, at)
      if b == QUOTE then
        skip_string()
      elseif b == nil then
        error('unterminated value')
      else
        depth = depth + (OPENS[b] and 1 or CLOSES[b] and -1 or 0)
        at = at + 1
      end
    until depth == 0
  end

  -- The key of the pair starting here, unescaped, if it may be one the skim looks for.
  local function key()
    if byte(s, at) ~= QUOTE then
      error('no key')
    end
    local first = at
    skip_string()
    if at - first > LONGEST_KEY then
      return nil
    end
    local raw = sub(s, first + 1, at - 2)
    if find(raw, '\\', 1, true) then
      return cjson.decode(sub(s, first, at - 1))
    end
    return raw
  end

  if spaces() ~= 123 then
    error('not an object')
  end
  at = at + 1
  local found = {}
  local b = spaces()
  while b ~= 125 do  -- }
    local name = key()
    if spaces() ~= COLON then
      error('no colon')
    end
    at = at + 1
    spaces()
    local first = at
    skip_value()
    if name == 'properties' or name == 'headers' then
      found[name] = {first, at - 1}
    end
    b = spaces()
    if b == COMMA then
      at = at + 1
      b = spaces()
    elseif b ~= 125 then
      error('no comma')
    end
  end
  at = at + 1
  if spaces() ~= nil then
    error('more after the object')
  end
  local properties, headers = found.properties, found.headers
  if properties and properties[2] - properties[1] >= FULL_READ_MAX then
    error('properties too big to decode')  -- kombu's are a few hundred bytes
  end
  return properties and sub(s, properties[1], properties[2]), headers and byte(s, headers[1])
end

-- The envelope of a big message, skimmed: its decoded properties, and its headers as
-- cjson would read them (a table for [] and {}, anything else as something else).
local function skimmed(message)
  local properties, headers = skim(message)
  return {
    properties = properties and cjson.decode(properties),
    headers = headers and (OPENS[headers] and {} or false),
  }
end

-- The parts of the message's envelope that unreadable() looks at, or nil and why it cannot
-- be taken, or false for a big message the skim cannot follow (see the top).
local function read(message)
  local ok, payload
  if #message <= FULL_READ_MAX then
    ok, payload = pcall(cjson.decode, message)
  else
    ok, payload = pcall(skimmed, message)
    if not ok then
      return false
    end
  end
  if not ok then
    return nil, 'not JSON'
  end
  local reason = unreadable(payload)
  if reason then
    return nil, reason
  end
  return payload
end

-- kombu's unacked entry of a message taken from queue: it names the default exchange and
-- the queue, so any restore puts the message back in that queue, whatever its delivery info
-- names (an exchange with no bindings left would route it nowhere).
local function entry_of(message, queue)
  return '[' .. message .. ', "", ' .. cjson.encode(queue) .. ']'
end

-- The delivery tag and entry ("" for a consumer that does not record) of a message, or
-- nil and why it cannot be taken; a big message the skim cannot follow is recorded under
-- the consumer's provisional tag, to come back to its queue.
local function take(message, queue)
  local payload, reason = read(message)
  if payload == false then
    return ARGV[2], queue ~= '' and entry_of(message, queue) or ''
  end
  if not payload then
    return nil, reason
  end
  return payload['properties']['delivery_tag'], queue ~= '' and entry_of(message, queue) or ''
end

for i = 3, #KEYS do
  local message = redis.call('RPOP', KEYS[i])
  if message then
    local ok, tag, entry = pcall(take, message, ARGV[i])
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
