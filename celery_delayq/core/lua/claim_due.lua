--! include prelude.lua
--! include helpers.lua
--! include handover.lua
-- Claim a bounded batch of due messages for one mover pass (after prelude.lua and
-- handover.lua, which explains the protocol), first giving back expired claims.
--
-- ARGV[3]  most messages to claim
-- ARGV[4]  payload bytes after which this call stops claiming
-- ARGV[5]  owner of the claims (unique per mover pass)
-- ARGV[6]  lease (ms): an unacked claim comes back to the schedule after it
-- ARGV[7]  most tries: the try that reaches it dead-letters the message
-- ARGV[8]  the claiming mover (the same for all its passes)
-- ARGV[9]  how long (ms) the queue (shard) stays that mover's after it claimed: one
--          claimer at a time keeps a shard's publishes in due order, and a mover that
--          died is replaced this soon
-- Returns  {server time in ms, next due time in ms or -1, due entries whose record was
--           missing or unreadable (an unreadable one is dead-lettered with the reason),
--           expired claims given back, messages dead-lettered,
--           ms until another mover's hold ends (0: the claim was ours to make),
--           then key, record for every claimed message, in due order}

local now = server_now()
local limit, budget, owner = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local lease, most_tries = tonumber(ARGV[6]), tonumber(ARGV[7])
local claimer, hold = ARGV[8], tonumber(ARGV[9])

local holder = redis.call('GET', CLAIMER)
if holder and holder ~= claimer then
  local _, next_due = head()
  return {now, next_due and tonumber(next_due) or -1, 0, 0, 0,
          math.max(1, redis.call('PTTL', CLAIMER))}
end

-- Expired claims first: their mover died or hung between claim and ack. The message
-- may or may not have reached the broker; it is due again at its own due time.
local given_back, dead = 0, 0
local expired = redis.call('ZRANGEBYSCORE', INFLIGHT, '-inf', now, 'LIMIT', 0, limit)
for _, key in ipairs(expired) do
  unclaim(key)
  local record = redis.call('HGET', MSG, key)
  local due = record and parse(record) or now
  dead = dead + failed_once(key, due, most_tries, 'claim expired: the mover died or could ' ..
                            'not publish within the lease', now)
  given_back = given_back + 1
end

local found, taken_from, missing = collect_due(now, limit, budget)
drop_taken(taken_from)
bury_unreadable(found, DEAD, DEAD_WHY, now)
local _, next_due = head()
local reply = {now, next_due and tonumber(next_due) or -1, missing, given_back, dead, 0}
if found.n > 0 then redis.call('SET', CLAIMER, claimer, 'PX', hold) end
for i = 1, found.n do
  local key = found.key[i]
  redis.call('ZADD', INFLIGHT, now + lease, key)
  redis.call('HSET', CLAIMS, key, owner)
  release_key(found.delay_key[i], key)
  reply[#reply + 1] = key
  reply[#reply + 1] = found.record[i]
end
return reply
