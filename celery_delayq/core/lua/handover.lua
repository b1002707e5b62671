-- Shared start of the claim -> publish -> ack scripts, after prelude.lua and helpers.lua
-- (claim_due.lua, ack_claimed.lua, release_claimed.lua and resend_dead.lua include all three).
--
-- When the queues live in another system (RabbitMQ, another Redis), no script can move
-- a message there atomically. A mover claims due messages (claim_due.lua), publishes
-- them with publisher confirms, then acks the confirmed ones (ack_claimed.lua) and
-- gives back the refused ones (release_claimed.lua). A claimed message keeps its record
-- in MSG (so nothing is lost if the mover dies) but leaves the pages (so no other mover
-- takes it); a claim whose lease runs out comes back to the pages.
-- A keyed message gives up its delay key when claimed, and holds it again if it comes
-- back (unless a newer message took the key meanwhile).
--
-- A flow-controlled message (gates.lua) is claimed only when its bucket releases it, and
-- the release counts it against its limits once. Should its hand-over fail (its claim
-- expires, or the broker refuses it or cannot be reached), it comes back without its
-- gate (ungated): released already, it is handed over again unlimited, not counted a
-- second time nor made to wait for its bucket's turn again. Its concurrency slot, if
-- its bucket has one, stays taken until its lease ends.
--
-- KEYS[5]  P:{Q}:inflight  zset  claimed message key -> lease deadline (ms, Redis clock)
-- KEYS[6]  P:{Q}:claims    hash  claimed message key -> owner (one mover pass)
-- KEYS[7]  P:{Q}:tries     hash  message key -> failed hand-overs so far (refused or expired)
-- KEYS[8]  P:{Q}:dead      hash  message key -> record, for messages that kept failing
-- KEYS[9]  P:{Q}:dead:why  hash  message key -> "<ms when> <tries> <reason>"
-- KEYS[10] P:{Q}:claimer   string the mover that claims from this queue (shard) now; it
--                                 expires soon after that mover's last claim
-- KEYS[11] P:{Q}:fc:ready  zset  flow control's ready buckets (gates.lua; claim_due.lua
--                                releases from them, the other scripts leave it alone)

local INFLIGHT, CLAIMS, TRIES, DEAD, DEAD_WHY = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local CLAIMER = KEYS[10]

-- Drop a claim, whoever holds it.
local function unclaim(key)
  redis.call('ZREM', INFLIGHT, key)
  redis.call('HDEL', CLAIMS, key)
end

-- Move a message that keeps failing out of the schedule into the dead letters.
local function dead_letter(key, record, tries, reason, now)
  redis.call('HSET', DEAD, key, record)
  redis.call('HSET', DEAD_WHY, key, now .. ' ' .. tries .. ' ' .. reason)
  redis.call('HDEL', MSG, key)
  redis.call('HDEL', TRIES, key)
  forget_duplicate(key)
  redis.call('HINCRBY', STATS, 'dead', 1)
end

-- A released message's record without its gate (see above), rewritten in MSG; as it was
-- when it has none, or a gate written otherwise than layout/record.py writes it (that
-- message then waits in its bucket again).
local function ungated(key, record)
  local _, _, start, _, _, gate = parse(record)
  if not gate then return record end
  local field = 'l' .. #gate .. ':' .. gate
  local from = start - 1 - #field
  if from < 2 or string.sub(record, from, start - 2) ~= field then return record end
  record = string.sub(record, 1, from - 1) .. string.sub(record, start - 1)
  redis.call('HSET', MSG, key, record)
  return record
end

-- Count one failed hand-over of an unclaimed message, then either schedule it again at
-- `due` (rewriting its record's due time when it changes) or, at the last allowed try,
-- dead-letter it; either way ungated. Returns 1 when dead-lettered, else 0. A message
-- cancelled meanwhile (no record left) is forgotten.
local function failed_once(key, due, most_tries, reason, now)
  local record = redis.call('HGET', MSG, key)
  if not record then
    redis.call('HDEL', TRIES, key)
    return 0
  end
  record = ungated(key, record)
  local tries = redis.call('HINCRBY', TRIES, key, 1)
  if tries >= most_tries then
    dead_letter(key, record, tries, reason, now)
    return 1
  end
  local old_due, _, start = parse(record)
  if old_due and tostring(due) ~= old_due then
    record = with_due(record, old_due, due)
    redis.call('HSET', MSG, key, record)
  end
  if not start then due = 0 end  -- unreadable: due at once, so the mover reports it
  add_entry(key, due)
  hold_key_again(record, key, now)
  return 0
end
