--! include prelude.lua
--! include helpers.lua
--! include handover.lua
--! include gates.lua
-- Claim a bounded batch of due messages for one mover pass (after prelude.lua and
-- handover.lua, which explains the protocol), first giving back expired claims.
--
-- Flow control (gates.lua): a due message with a gate is not claimed but waits in its
-- bucket; then the buckets whose limits allow release their next messages, and those
-- are claimed like the others (in INFLIGHT with their lease, returned below). The
-- release is what counts against the limits (and is logged), so a released message
-- whose hand-over fails comes back ungated (handover.lua) and goes out unlimited,
-- counted once. Only the queue shard's claimer releases: a bucket's releases are
-- published in order by one mover. A limit holds across shards and movers because a
-- bucket lives in one shard (gates.lua).
--
-- KEYS[11] P:{Q}:fc:ready  zset  flow control's ready buckets (gates.lua)
-- ARGV[3]  most messages to claim, and most to release from the buckets
-- ARGV[4]  payload bytes after which this call stops claiming
-- ARGV[5]  owner of the claims (unique per mover pass)
-- ARGV[6]  lease (ms): an unacked claim comes back to the schedule after it
-- ARGV[7]  most tries: the try that reaches it dead-letters the message
-- ARGV[8]  the claiming mover (the same for all its passes)
-- ARGV[9]  how long (ms) the queue (shard) stays that mover's after it claimed: one
--          claimer at a time keeps a shard's publishes in due order, and a mover that
--          died is replaced this soon
-- ARGV[10] how many releases the flow-control log keeps (0: none; gates.lua)
-- Returns  {server time in ms, next due time (or next release from a bucket) in ms or
--           -1 (none, or the queue is paused), due entries whose record was missing or
--           unreadable (an unreadable one is dead-lettered with the reason), expired
--           claims given back, messages dead-lettered, ms until another mover's hold ends
--           (0: the claim was ours to make), how long (us) the call kept Redis busy
--           (worked_us in helpers.lua; 0: not measured), then key, record for every
--           claimed message:
--           the released ones first (they waited in their buckets), then the others in
--           due order}

local started = work_clock_us()
local now = server_now()
local limit, budget, owner = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local lease, most_tries = tonumber(ARGV[6]), tonumber(ARGV[7])
local claimer, hold = ARGV[8], tonumber(ARGV[9])
local log_size = tonumber(ARGV[10])

-- When (ms) the next message is due or may be released, or -1.
local function next_due_ms()
  local _, next_due = head()
  next_due = next_due and tonumber(next_due)
  local release = next_release_ms()
  if release and (not next_due or release < next_due) then next_due = release end
  return next_due or -1
end

-- A paused queue (ops/pause.py's pause_queue: P:{Q}:fc:paused) hands nothing over, due or
-- gated; claims in flight keep their leases.
if redis.call('EXISTS', GATES .. 'paused') == 1 then return {now, -1, 0, 0, 0, 0, 0} end

local holder = redis.call('GET', CLAIMER)
if holder and holder ~= claimer then
  return {now, next_due_ms(), 0, 0, 0, math.max(1, redis.call('PTTL', CLAIMER)), 0}
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
local now_us = server_us()
local claimed = {}  -- message key, record, ...
for i = 1, found.n do
  local spec, bucket = gate_parts(found.gate[i])
  if spec and not gate_usable(bucket) then  -- crafted keys: claimed unlimited
    found.gate[i], spec = nil, nil
  end
  if spec and not enter_gate(found.key[i], spec, bucket, now_us, now) then
    found.gate[i] = nil  -- its waiting list crafted: claimed unlimited
  end
  release_key(found.delay_key[i], found.key[i])
end
local released = {n = 0, key = {}, record = {}, due = {}, destination = {}, start = {},
                  expires = {}, bad_key = {}, bad_record = {}, bad_reason = {}}
release_gates(now_us, now, now, most_releases(limit), budget, log_size, released,
              function() return true end)
bury_unreadable(released, DEAD, DEAD_WHY, now)
for i = 1, released.n do
  claimed[#claimed + 1] = released.key[i]
  claimed[#claimed + 1] = released.record[i]
end
for i = 1, found.n do
  if not gate_parts(found.gate[i]) then
    claimed[#claimed + 1] = found.key[i]
    claimed[#claimed + 1] = found.record[i]
  end
end

local reply = {now, next_due_ms(), missing + #released.bad_key, given_back, dead, 0, 0}
if #claimed > 0 then redis.call('SET', CLAIMER, claimer, 'PX', hold) end
for i = 1, #claimed, 2 do
  local key = claimed[i]
  redis.call('ZADD', INFLIGHT, now + lease, key)
  redis.call('HSET', CLAIMS, key, owner)
  reply[#reply + 1] = key
  reply[#reply + 1] = claimed[i + 1]
end
reply[7] = worked_us(started)
return reply
